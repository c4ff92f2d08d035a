"""The shared library exports only memra_* and carries the expected soname."""
import subprocess
import sys

lib, soname = sys.argv[1], sys.argv[2]
syms = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True,
                      text=True).stdout.split("\n")
names = [line.split()[-1].split("@")[0] for line in syms if line.strip()]
bad = [n for n in names if not n.startswith("memra_") and n != "MEMRA_0"]
if bad:
    sys.exit(f"non-memra symbols exported: {bad}")
# The 0.2 names went in 0.4, as 0.3 said they would.
gone = [n for n in names if n.startswith(("memra_moe_", "memra_copy_"))]
if gone:
    sys.exit(f"0.2 names still exported: {gone}")
missing = [n for n in ("memra_vrows_tables", "memra_route_tables_ex", "memra_set_log_callback",
                       "memra_nvrtc_list", "memra_cache_get_info", "memra_driver_version")
           if n not in names]
if missing:
    sys.exit(f"public API missing from the export table: {missing}")
dyn = subprocess.run(["readelf", "-d", lib], check=True, capture_output=True, text=True).stdout
if f"Library soname: [{soname}]" not in dyn:
    sys.exit(f"soname is not {soname}:\n{dyn}")
needed = [l for l in dyn.split("\n") if "NEEDED" in l]
if any("cuda" in l or "nvrtc" in l for l in needed):
    sys.exit(f"links CUDA at build time: {needed}")
print(f"{len(names) - 1} memra_* symbols exported, soname {soname}, no CUDA library linked")
