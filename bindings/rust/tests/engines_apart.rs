//! A buffer or stream of one engine is refused by an engine of another
//! device (its calls would launch on memory that device cannot reach): an
//! `InvalidArg` naming the argument, not a launch. Engines of one device
//! share its primary context, so they share buffers; raw addresses
//! (`from_raw`) stay the caller's promise. They were all accepted.
//!
//! Needs two devices: `tools/test.sh` runs it on the mock driver with
//! `FAKE_CUDA_DEVICES=2`; on a machine with one GPU it says so and passes.

use memra::{
    DevSlice, DevSliceMut, Engine, Layer, RouteOut, RouteSpec, Slabs, Status, Stream, VrowsOptions,
};

mod common;

use common::R;

fn refused<T: std::fmt::Debug>(what: &str, r: memra::Result<T>, names: &str) {
    match r {
        Err(e) if e.status() == Some(Status::InvalidArg) && e.to_string().contains(names) => {
            assert!(e.to_string().contains("engine on device 0"), "{what}: {e}")
        }
        other => panic!("{what}: want InvalidArg naming {names:?}, got {other:?}"),
    }
}

#[test]
#[ignore = "needs two CUDA devices (tools/test.sh: the mock driver with FAKE_CUDA_DEVICES=2)"]
fn another_devices_engine_refuses_a_buffer_and_a_stream() -> R<()> {
    common::need_library();
    if memra::device_count()? < 2 {
        println!("one device: nothing to check");
        return Ok(());
    }
    let (a, b) = (Engine::new(0)?, Engine::new(1)?);
    let n = 4usize;
    let sel_a = a.htod_i32(&[0, 1, 2, 3])?;
    let selw_a = a.htod(&[0.5; 4])?;
    let (mut ptrs_a, mut scl_a) = (a.htod_u64(&[7; 12])?, a.htod(&[7.0; 12])?);
    let sel_b = b.htod_i32(&[0, 1, 2, 3])?;
    let selw_b = b.htod(&[0.5; 4])?;
    let (mut ptrs_b, mut scl_b) = (b.htod_u64(&[7; 12])?, b.htod(&[7.0; 12])?);
    let bases = (0x7f00_0000_0000, 0x7f40_0000_0000, 0x7f80_0000_0000);
    let strides = (1 << 20, 1 << 20, 1 << 20);

    // The seed's calls and the copies.
    refused("dtoh", b.dtoh(&scl_a), "buf");
    refused("upload", b.upload(&mut scl_a, &[1.0; 12]), "upload: dst");
    let mut host = [0f32; 12];
    refused("download", b.download(&mut host, &scl_a), "download: src");
    refused(
        "tables",
        b.moe_vrows_tables_from_sel(
            &sel_a,
            &selw_b,
            0,
            None,
            bases,
            strides,
            n,
            &mut ptrs_b,
            &mut scl_b,
        ),
        "sel",
    );
    refused(
        "tables (output)",
        b.moe_vrows_tables_from_sel(
            &sel_b,
            &selw_b,
            0,
            None,
            bases,
            strides,
            n,
            &mut ptrs_a,
            &mut scl_b,
        ),
        "ptrs",
    );
    // A's own stream on B.
    let sa = a.stream()?;
    refused("sync", b.sync(&sa), "stream");
    refused("faults", b.faults(&sa, false), "stream");
    refused(
        "upload_on",
        b.upload_on(&sa, &mut scl_b, &[1.0; 12]),
        "stream",
    );

    // The option and routing calls.
    let layer = Layer::new(0, Slabs::new(bases, strides));
    let legacy = Stream::legacy();
    refused(
        "vrows_tables_ex",
        b.vrows_tables_ex(
            &legacy,
            &sel_b,
            &selw_a,
            n,
            4,
            &layer,
            &VrowsOptions::default(),
            &mut ptrs_b,
            &mut scl_b,
        ),
        "selw",
    );
    let map_a = a.htod_i32(&[0, 1, 2, 3])?;
    refused(
        "vrows_tables_ex (map)",
        b.vrows_tables_ex(
            &legacy,
            &sel_b,
            &selw_b,
            n,
            4,
            &layer,
            &VrowsOptions::default().expert_map_device(map_a.slice(), 4),
            &mut ptrs_b,
            &mut scl_b,
        ),
        "expert_map",
    );
    let logits_a = a.htod(&[0.0; 8])?;
    let logits_b = b.htod(&[0.0; 8])?;
    let spec = RouteSpec::new(8, 1);
    let (mut rs, mut rw) = (b.alloc::<i32>(1)?, b.alloc::<f32>(1)?);
    let (mut rp, mut rc) = (b.alloc::<u64>(3)?, b.alloc::<f32>(3)?);
    refused(
        "route_tables (logits)",
        b.route_tables(
            &legacy,
            &logits_a,
            1,
            &spec,
            &layer,
            RouteOut::new(&mut rs, &mut rw, &mut rp, &mut rc),
        ),
        "logits",
    );
    let bias_a = a.htod(&[0.0; 8])?;
    let biased = RouteSpec::new(8, 1).bias_device(bias_a.slice());
    refused(
        "route_tables (bias)",
        b.route_tables(
            &legacy,
            &logits_b,
            1,
            &biased,
            &layer,
            RouteOut::new(&mut rs, &mut rw, &mut rp, &mut rc),
        ),
        "spec: the bias",
    );
    refused(
        "route_prepare_layer (bias)",
        b.route_prepare_layer(0, &biased, None, &legacy),
        "spec: the bias",
    );
    let mut out_a = a.alloc::<f32>(1)?;
    refused(
        "route_tables (output)",
        b.route_tables(
            &legacy,
            &logits_b,
            1,
            &spec,
            &layer,
            RouteOut::new(&mut rs, &mut out_a, &mut rp, &mut rc),
        ),
        "out.selw",
    );

    // Nothing was launched into A's memory.
    assert_eq!(a.dtoh(&scl_a)?, vec![7.0; 12]);
    assert_eq!(a.dtoh_u64(&ptrs_a)?, vec![7; 12]);

    // Engines of one device share its memory; a raw address is the caller's word.
    let a2 = Engine::new(0)?;
    assert_eq!(a2.dtoh(&scl_a)?, vec![7.0; 12]);
    a2.sync(&sa)?;
    let raw_b = unsafe { DevSlice::<f32>::from_raw(scl_b.device_ptr(), 12) };
    b.download(&mut host, raw_b)?;
    let raw_b_mut = unsafe { DevSliceMut::<f32>::from_raw(scl_b.device_ptr(), 12) };
    b.upload(raw_b_mut, &[2.0; 12])?;
    b.moe_vrows_tables_from_sel(
        &sel_b,
        &selw_b,
        0,
        None,
        bases,
        strides,
        n,
        &mut ptrs_b,
        &mut scl_b,
    )?;
    b.sync(&b.stream()?)?;
    Ok(())
}
