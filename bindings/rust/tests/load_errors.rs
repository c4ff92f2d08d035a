//! A library that cannot be opened is an `Error::Library` naming the path,
//! from every call, never a panic. (Its own test binary: the library is
//! opened once per process.)

use memra::{vrows_tables_host, Engine, Error};

#[test]
fn missing_library_is_a_clear_error() {
    std::env::set_var("MEMRA_LIB", "/no/such/dir/libmemra.so.2");
    for e in [
        Engine::new(0).err().unwrap(),
        vrows_tables_host(&[0], &[1.0], 1, None, (0, 0, 0), (1, 1, 1)).unwrap_err(),
        memra::version().unwrap_err(),
    ] {
        match &e {
            Error::Library(m) => assert!(m.contains("/no/such/dir/libmemra.so.2"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(e.status().is_none());
    }
}
