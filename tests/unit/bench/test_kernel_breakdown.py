"""benchmarks/kernel_breakdown.py on a made-up ncu CSV: units, thousands separators, the key
(name without namespaces or template arguments, plus grid), per-step division and the
difference of two runs.   python3 test_kernel_breakdown.py path/to/kernel_breakdown.py"""
import importlib.util
import os
import sys
import tempfile

HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
        '"Metric Value"')


def load(path):
    spec = importlib.util.spec_from_file_location("kernel_breakdown", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def row(i, name, grid, unit, value):
    return (f'"{i}","1","bench","h","{name}","1","7","(256, 1, 1)","{grid}","0","9.0",'
            f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"')


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def main():
    kb = load(sys.argv[1])
    gemv1 = ("void tandem::kernels::(anonymous namespace)::gemv_kernel<1, float, true, "
             "(bool)1, 2, false>(const __nv_bfloat16 *, const __nv_bfloat16 *, int, int)")
    gemv2 = gemv1.replace("gemv_kernel<1,", "gemv_kernel<2,")
    attn = "void tandem::kernels::decode_attention_tc_kernel<64, true>(const __nv_bfloat16 *)"
    check(kb.base_name(gemv1) == "gemv_kernel", f"base name {kb.base_name(gemv1)!r}")
    check(kb.base_name(attn) == "decode_attention_tc_kernel", "base name of a plain namespace")
    # ncu 2025.3's spelling of the anonymous namespace, as the H100 / H200 machines print it.
    argmax = "unnamed>::argmax_slices_kernel(const float *, unnamed>::RowList, int, int *)"
    check(kb.base_name(argmax) == "argmax_slices_kernel", f"base name {kb.base_name(argmax)!r}")
    norm = "void unnamed>::add_rmsnorm_kernel<4, 1>(float *, const __nv_bfloat16 *, int)"
    check(kb.base_name(norm) == "add_rmsnorm_kernel", f"base name {kb.base_name(norm)!r}")
    d = tempfile.mkdtemp()
    a, b = os.path.join(d, "a.csv"), os.path.join(d, "b.csv")
    # Two steps each; the program's own output and ncu's notes before the table, a row of
    # another metric and a truncated row after it.
    with open(a, "w") as f:
        f.write("\n".join([
            "loading weights [####] 100%", '{"tpot_ms": 0.5}', "==PROF== Disconnected", HEAD,
            row(0, gemv1, "(112, 1, 1)", "usecond", "2.50"),
            row(1, attn, "(1, 2, 1)", "nsecond", "3,000"),
            row(2, gemv1, "(112, 1, 1)", "us", "3.50"),
            row(3, attn, "(1, 2, 1)", "ns", "1,000"),
            row(4, gemv1, "(9496, 1, 1)", "msecond", "0.066").replace(
                "gpu__time_duration.sum", "sm__cycles_elapsed.avg"),
            '"5","1","bench"',
        ]) + "\n")
    with open(b, "w") as f:
        f.write("\n".join([
            HEAD,
            row(0, gemv2, "(112, 1, 1)", "usecond", "4.00"),
            row(1, attn, "(2, 2, 1)", "usecond", "5.00"),
            row(2, gemv2, "(112, 1, 1)", "usecond", "4.00"),
            row(3, attn, "(2, 2, 1)", "usecond", "7.00"),
        ]) + "\n")
    ra, rb = kb.read(a), kb.read(b)
    check(set(ra) == {"gemv_kernel (112, 1, 1)", "decode_attention_tc_kernel (1, 2, 1)"},
          f"keys {sorted(ra)}")
    check(abs(ra["gemv_kernel (112, 1, 1)"][0] - 6.0) < 1e-9 and
          ra["gemv_kernel (112, 1, 1)"][1] == 2, "gemv total and launches")
    check(abs(ra["decode_attention_tc_kernel (1, 2, 1)"][0] - 4.0) < 1e-9,
          "nanoseconds with a thousands separator")
    lines, sums = kb.table([ra, rb], 2)
    check(abs(sums[0] - 5.0) < 1e-9 and abs(sums[1] - 10.0) < 1e-9, f"per-step sums {sums}")
    gemv_line = next(line for line in lines if line.startswith("gemv_kernel (112"))
    check(gemv_line.split()[-1] == "1.00", f"delta of the GEMV: {gemv_line!r}")
    check(lines[-1].split()[-1] == "5.00", f"delta of the step: {lines[-1]!r}")
    # The 2-token attention's grid differs: a row of its own, 0 in the first run.
    attn2 = next(line for line in lines if line.startswith("decode_attention_tc_kernel (2"))
    check(attn2.split()[-1] == "6.00", f"a kernel only in the second run: {attn2!r}")
    print("kernel_breakdown: ok")


if __name__ == "__main__":
    main()
