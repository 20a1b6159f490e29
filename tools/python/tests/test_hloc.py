"""The Python package `hloc` against the `hloc` command line and XLA's outputs.

Run by tools/tests/python_package.rs (part of `cargo test --workspace`), which sets:
  HLOC_BIN     the `hloc` binary of the same build
  HLOC_SHARED  ../shared (the corpus)
  HLOC_CASES   hlo-tests/cases (the golden cases with `// error-at: L:C`)
and puts the package (with the native module of the same build) on PYTHONPATH. Every
comparison with the command line runs the binary on the same file and compares what it
printed or wrote with what the package returned or raised.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
import warnings
from pathlib import Path

import numpy as np

import hloc

BIN = os.environ["HLOC_BIN"]
SHARED = Path(os.environ["HLOC_SHARED"])
CORPUS = SHARED / "corpus"
CASES = Path(os.environ["HLOC_CASES"])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BIN, *args], capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})


def corpus_names(suffix: str) -> list[str]:
    return sorted(p.name[: -len(suffix)] for p in CORPUS.glob("*" + suffix))


def error_at(src: str) -> tuple[int, int] | None:
    for line in src.splitlines():
        if not line.startswith("//"):
            break
        m = re.match(r"// error-at:\s*(\d+):(\d+)", line)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def bits(a: np.ndarray) -> tuple[tuple[int, ...], bytes]:
    """The shape and the bytes of `a` as the npz conventions store it (sub-byte types as
    one int8/uint8 value per element), to compare two arrays bit for bit."""
    name = a.dtype.name
    if name in ("int4", "int2", "int1"):
        a = a.astype(np.int8)
    elif name in ("uint4", "uint2", "uint1"):
        a = a.astype(np.uint8)
    return a.shape, np.ascontiguousarray(a).tobytes()


def npz_arrays(path: Path, prefix: str) -> list[np.ndarray]:
    with np.load(path) as z:
        n = len([k for k in z.files if re.fullmatch(prefix + r"\d+", k)])
        return [z[f"{prefix}{i}"] for i in range(n)]


class Check(unittest.TestCase):
    def test_malformed_module_raises_located_error_with_the_cli_text(self) -> None:
        src = "HloModule m\nENTRY e {\n  p0 = f33[8] parameter(0)\n  ROOT n = f32[8] negate(p0)\n}\n"
        with tempfile.TemporaryDirectory() as d:
            f = Path(d, "bad.hlo")
            f.write_text(src)
            with self.assertRaises(hloc.HloError) as cm:
                hloc.check(src, path=str(f))
            e = cm.exception
            self.assertEqual((e.line, e.column), (3, 8))
            self.assertTrue(str(e).startswith(f"{f}:3:8: error: unknown element type `f33`"), str(e))
            out = cli("check", str(f))
            self.assertEqual(out.returncode, 1)
            self.assertEqual(str(e), out.stderr.rstrip("\n"))
            self.assertEqual(e.message, str(e))
        # The default name, and a clean module passes.
        with self.assertRaises(hloc.HloError) as cm:
            hloc.check(src)
        self.assertTrue(str(cm.exception).startswith("<string>:3:8: error:"))
        self.assertIsNone(hloc.check(src.replace("f33", "f32")))

    def test_every_golden_error_case_matches_the_cli(self) -> None:
        """Every case with `// error-at: L:C` in the parse, verify, shape and dynamic
        suites: `check` raises at exactly that place, with the text `hloc check` prints."""
        n = 0
        for suite in ("parse", "verify", "shape", "dynamic"):
            for f in sorted((CASES / suite).glob("*.hlo")):
                src = f.read_text()
                want = error_at(src)
                if want is None:
                    continue
                with self.subTest(case=f"{suite}/{f.name}"):
                    with self.assertRaises(hloc.HloError) as cm:
                        hloc.check(src, path=str(f))
                    self.assertEqual((cm.exception.line, cm.exception.column), want)
                    out = cli("check", str(f))
                    self.assertEqual(out.returncode, 1, out.stderr)
                    self.assertEqual(str(cm.exception), out.stderr.rstrip("\n"))
                n += 1
        self.assertGreater(n, 100, "the golden error cases were not found")

    def test_corpus_modules_with_dynamic_shapes_are_rejected_as_by_the_cli(self) -> None:
        rejected = 0
        for name in corpus_names(".hlo"):
            f = CORPUS / f"{name}.hlo"
            out = cli("check", str(f))
            try:
                hloc.check(f.read_text(), path=str(f))
                self.assertEqual(out.returncode, 0, f"{name}: the CLI rejects it:\n{out.stderr}")
            except hloc.HloError as e:
                rejected += 1
                self.assertEqual(out.returncode, 1, f"{name}: the CLI accepts it")
                self.assertEqual(str(e), out.stderr.rstrip("\n"), name)
                self.assertIsNotNone(e.line, name)
        self.assertGreater(rejected, 0, "no corpus module was rejected (dyn_bounded_hlo is)")

    def test_binary_and_unterminated_text_raise_not_crash(self) -> None:
        for text in ["", "HloModule", "\x00\x01\x02", "HloModule m\nENTRY e {\n  p = f32[", "ENTRY {" * 200]:
            with self.assertRaises(hloc.HloError):
                hloc.check(text)


class Run(unittest.TestCase):
    def test_outputs_equal_the_cli_bit_for_bit_and_xla_within_tolerance(self) -> None:
        """Every corpus program with inputs, its JAX module and XLA's optimized one
        (`.opt.hlo`): the JIT's outputs equal `hloc run -o`'s bit for bit; the JAX
        module's equal XLA's within the case's tolerances."""
        compared = xla = 0
        with tempfile.TemporaryDirectory() as d:
            for name in corpus_names(".inputs.npz"):
                inputs = npz_arrays(CORPUS / f"{name}.inputs.npz", "p")
                for suffix in (".hlo", ".opt.hlo"):
                    f = CORPUS / f"{name}{suffix}"
                    if not f.exists():
                        continue
                    out_file = Path(d, f"{name}{suffix}.npz")
                    out = cli("run", str(f), "--inputs", str(CORPUS / f"{name}.inputs.npz"), "-o", str(out_file))
                    with self.subTest(case=f.name):
                        try:
                            with warnings.catch_warnings():
                                warnings.simplefilter("ignore", hloc.HloWarning)
                                got = hloc.run(f.read_text(), inputs, path=str(f))
                        except hloc.HloError as e:
                            # XLA's partitioned `.opt.hlo` of a sharded case takes the
                            # shards, not the global inputs: refused alike.
                            self.assertNotEqual(out.returncode, 0, f"{f.name}: the CLI runs it: {e}")
                            npz = str(CORPUS / f"{name}.inputs.npz")
                            self.assertEqual(str(e), out.stderr.rstrip("\n").replace(npz, "inputs"))
                            continue
                        self.assertEqual(out.returncode, 0, out.stderr)
                        want = npz_arrays(out_file, "o")
                        self.assertEqual(len(got), len(want))
                        for i, (g, w) in enumerate(zip(got, want)):
                            self.assertEqual(bits(g), bits(w), f"{f.name} o{i}")
                        compared += 1
                        if suffix == ".hlo":
                            xla += self.assert_matches_xla(name, got)
        self.assertGreater(compared, 60)
        self.assertGreater(xla, 30)

    def assert_matches_xla(self, name: str, got: list[np.ndarray]) -> int:
        expected = CORPUS / f"{name}.outputs.npz"
        if not expected.exists():
            return 0
        meta = json.loads((CORPUS / f"{name}.json").read_text())
        want = npz_arrays(expected, "o")
        self.assertEqual(len(got), len(want), name)
        for i, (g, w) in enumerate(zip(got, want)):
            tol = meta["outputs"][i].get("tolerance", {})
            rtol, atol = float(tol.get("rtol", 0.0)), float(tol.get("atol", 0.0))
            if g.dtype.name == "bfloat16":
                g = g.view(np.uint16)  # the npz stores bf16 as uint16 bits
            self.assertEqual(g.shape, w.shape, f"{name} o{i}")
            if w.dtype.kind in "biu" or (rtol == 0 and atol == 0):
                self.assertTrue(np.array_equal(g, w), f"{name} o{i}")
                continue
            if meta["outputs"][i]["dtype"] == "bf16":
                import ml_dtypes

                g = g.view(ml_dtypes.bfloat16).astype(np.float64)
                w = w.view(ml_dtypes.bfloat16).astype(np.float64)
            ok = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
            self.assertTrue(ok.all(), f"{name} o{i}: {np.count_nonzero(~ok)} elements beyond rtol {rtol}, atol {atol}")
        return 1

    def test_interpreter_equals_the_cli(self) -> None:
        # A subset: the interpreter favours the obvious loop over the fast one, and the
        # training steps take seconds each in a debug build.
        with tempfile.TemporaryDirectory() as d:
            for name in ("cond", "dot_matmul", "ew_int_bitwise", "gather_scatter", "reverse_cumsum_sort", "train_mlp_bf16"):
                f = CORPUS / f"{name}.hlo"
                inputs = CORPUS / f"{name}.inputs.npz"
                out_file = Path(d, f"{name}.npz")
                out = cli("run", str(f), "--engine", "interp", "--inputs", str(inputs), "-o", str(out_file))
                self.assertEqual(out.returncode, 0, out.stderr)
                got = hloc.run(f.read_text(), npz_arrays(inputs, "p"), engine="interp")
                want = npz_arrays(out_file, "o")
                self.assertEqual([bits(g) for g in got], [bits(w) for w in want], name)

    def test_spmd_on_devices_equals_the_cli(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            for engine in ("jit", "interp"):
                name = "sharded_mlp_train"
                f = CORPUS / f"{name}.hlo"
                inputs = CORPUS / f"{name}.inputs.npz"
                out_file = Path(d, f"{name}.{engine}.npz")
                out = cli("run", str(f), "--engine", engine, "--devices", "8", "--inputs", str(inputs), "-o", str(out_file))
                self.assertEqual(out.returncode, 0, out.stderr)
                got = hloc.run(f.read_text(), npz_arrays(inputs, "p"), engine=engine, devices=8)
                self.assertEqual([bits(g) for g in got], [bits(w) for w in npz_arrays(out_file, "o")], engine)

    def test_driver_notes_are_warnings(self) -> None:
        text = "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n"
        x = np.arange(4, dtype=np.float32)
        with self.assertWarnsRegex(hloc.HloWarning, "the module has no shardings: every one of the 2 devices"):
            (y,) = hloc.run(text, [x], engine="interp", devices=2)
        np.testing.assert_array_equal(y, -x)

    def test_jit_cache_is_shared_across_calls(self) -> None:
        text = "HloModule cache_probe\nENTRY e {\n  p = f32[5] parameter(0)\n  ROOT r = f32[5] sine(p)\n}\n"
        before = hloc.jit_cache_stats()
        x = np.linspace(0, 1, 5, dtype=np.float32)
        a = hloc.run(text, [x])[0]
        mid = hloc.jit_cache_stats()
        b = hloc.run(text, [x])[0]
        after = hloc.jit_cache_stats()
        self.assertEqual(mid["misses"], before["misses"] + 1)
        self.assertEqual(after["misses"], mid["misses"], "the second call compiled again")
        self.assertEqual(after["hits"], mid["hits"] + 1)
        self.assertEqual(a.tobytes(), b.tobytes())
        np.testing.assert_allclose(a, np.sin(x), rtol=1e-6)
        self.assertTrue(a.flags.writeable)

    def test_dtypes_round_trip_on_every_engine(self) -> None:
        """Every element type of the runtime in and out of every engine, as numpy and
        ml_dtypes arrays: `negate` (`not` for unsigned types) computed as numpy does."""
        import ml_dtypes

        floats = [1.5, -2.0, 0.25]
        cases = [
            ("f32", np.float32, floats),
            ("f64", np.float64, floats),
            ("f16", np.float16, floats),
            ("bf16", ml_dtypes.bfloat16, floats),
            ("f8e4m3fn", ml_dtypes.float8_e4m3fn, floats),
            ("f8e5m2", ml_dtypes.float8_e5m2, floats),
            ("f8e4m3", ml_dtypes.float8_e4m3, floats),
            ("f8e3m4", ml_dtypes.float8_e3m4, floats),
            ("f4e2m1fn", ml_dtypes.float4_e2m1fn, floats),
            ("c64", np.complex64, [1 + 2j, -3j, 0.5]),
            ("c128", np.complex128, [1 + 2j, -3j, 0.5]),
            ("s8", np.int8, [3, -4, 5]),
            ("s16", np.int16, [3, -4, 5]),
            ("s32", np.int32, [3, -4, 5]),
            ("s64", np.int64, [3, -4, 5]),
            ("s4", ml_dtypes.int4, [3, -4, 5]),
            ("s2", ml_dtypes.int2, [1, -1, 0]),
            ("u8", np.uint8, [3, 200, 0]),
            ("u16", np.uint16, [3, 60000, 0]),
            ("u32", np.uint32, [3, 4000000000, 0]),
            ("u64", np.uint64, [3, 2**63, 0]),
            ("u4", ml_dtypes.uint4, [3, 15, 0]),
            ("u2", ml_dtypes.uint2, [3, 1, 0]),
        ]
        refused = []
        for elem, dtype, values in cases:
            x = np.array(values).astype(dtype)
            unsigned = elem.startswith("u")
            op = "not" if unsigned else "negate"
            if unsigned:
                mask = 2 ** int(elem[1:]) - 1
                want = np.array([mask - int(v) for v in values], dtype=np.uint64).astype(dtype)
            elif elem.startswith("c"):
                want = -x
            else:
                want = (-x.astype(np.float64)).astype(dtype)
            text = f"HloModule m\nENTRY e {{\n  p = {elem}[3] parameter(0)\n  ROOT n = {elem}[3] {op}(p)\n}}\n"
            for engine in ("jit", "interp", "tpu"):
                with self.subTest(elem=elem, engine=engine):
                    try:
                        (y,) = hloc.run(text, [x], engine=engine)
                    except hloc.HloError as e:
                        # An engine may refuse a type, at the instruction (never a crash).
                        self.assertIsNotNone(e.line, str(e))
                        refused.append((elem, engine))
                        continue
                    self.assertEqual(y.dtype, np.dtype(dtype))
                    self.assertEqual(y.shape, (3,))
                    self.assertEqual(bits(y), bits(want), f"{elem} on {engine}: {y} != {want}")
        # The JIT has no complex numbers; everything else runs everywhere.
        self.assertEqual(refused, [("c64", "jit"), ("c128", "jit")])
        # Predicates and unsigned integers, and bf16 given as its uint16 bit patterns.
        text = "HloModule m\nENTRY e {\n  p = pred[2] parameter(0)\n  q = u16[2] parameter(1)\n  ROOT t = (pred[2], u16[2]) tuple(p, q)\n}\n"
        a, b = hloc.run(text, [np.array([True, False]), np.array([7, 65535], np.uint16)])
        self.assertEqual((a.tolist(), b.tolist()), ([True, False], [7, 65535]))
        text = "HloModule m\nENTRY e {\n  p = bf16[2] parameter(0)\n  ROOT n = bf16[2] negate(p)\n}\n"
        (y,) = hloc.run(text, [np.array([1.0, 2.0], ml_dtypes.bfloat16).view(np.uint16)])
        self.assertEqual(y.astype(np.float32).tolist(), [-1.0, -2.0])

    def test_non_contiguous_and_big_endian_inputs(self) -> None:
        text = "HloModule m\nENTRY e {\n  p = f32[2,3] parameter(0)\n  ROOT n = f32[2,3] negate(p)\n}\n"
        x = np.arange(6, dtype=np.float32).reshape(3, 2).T  # Fortran order
        (y,) = hloc.run(text, [x])
        np.testing.assert_array_equal(y, -x)
        (y,) = hloc.run(text, [x.astype(">f4")])
        np.testing.assert_array_equal(y, -x)


class RunRobustness(unittest.TestCase):
    """Wrong inputs raise (with `hloc run --inputs`'s message), never crash."""

    TEXT = "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  q = s32[] parameter(1)\n  ROOT t = (f32[4], s32[]) tuple(p, q)\n}\n"

    def run_both(self, arrays: list[np.ndarray], engine: str) -> None:
        """The package's error equals the CLI's for the same arrays in an .npz."""
        with tempfile.TemporaryDirectory() as d:
            f, npz = Path(d, "m.hlo"), Path(d, "in.npz")
            f.write_text(self.TEXT)
            np.savez(npz, **{f"p{i}": a for i, a in enumerate(arrays)})
            out = cli("run", str(f), "--engine", engine, "--inputs", str(npz))
            self.assertEqual(out.returncode, 1)
            with self.assertRaises(hloc.InputError) as cm:
                hloc.run(self.TEXT, arrays, engine=engine)
            self.assertIsInstance(cm.exception, ValueError)
            self.assertEqual(str(cm.exception), out.stderr.rstrip("\n").replace(str(npz), "inputs"))

    def test_wrong_count_shape_dtype_on_each_engine(self) -> None:
        good = [np.zeros(4, np.float32), np.array(3, np.int32)]
        for engine in ("jit", "interp", "tpu"):
            with self.subTest(engine=engine):
                self.run_both(good[:1], engine)  # too few
                self.run_both(good + [np.zeros(1, np.float32)], engine)  # too many
                self.run_both([np.zeros(5, np.float32), good[1]], engine)  # dims
                self.run_both([np.zeros((2, 2), np.float32), good[1]], engine)  # rank
                self.run_both([np.zeros(4, np.float64), good[1]], engine)  # dtype
                self.run_both([np.zeros(4, np.float32), np.array(3, np.int64)], engine)
                (a, b) = hloc.run(self.TEXT, good, engine=engine)
                self.assertEqual((a.tolist(), int(b)), ([0.0] * 4, 3))

    def test_unrepresentable_inputs_and_arguments(self) -> None:
        cases = [
            [np.array(["a", "b", "c", "d"]), np.array(3, np.int32)],
            [np.array([object()] * 4), np.array(3, np.int32)],
            [np.zeros(4, np.float32), np.array([1, 2], np.int32).astype("datetime64[s]")],
        ]
        for arrays in cases:
            for engine in ("jit", "interp"):
                with self.subTest(dtype=str(arrays[0].dtype), engine=engine):
                    with self.assertRaises(hloc.InputError):
                        hloc.run(self.TEXT, arrays, engine=engine)
        good = [np.zeros(4, np.float32), np.array(3, np.int32)]
        with self.assertRaises(hloc.InputError):
            hloc.run(self.TEXT, good, engine="gpu")  # type: ignore[arg-type]
        with self.assertRaises(hloc.InputError):
            hloc.run(self.TEXT, good, devices=0)
        with self.assertRaises(hloc.InputError):
            hloc.run(self.TEXT, good, engine="tpu", chip="v9")  # type: ignore[arg-type]
        # Bytes that do not match their dims, past the Python layer: an error, no crash.
        from hloc import _hloc

        with self.assertRaises(hloc.InputError):
            _hloc.run(self.TEXT, [("f32", [4], b"\0" * 15), ("s32", [], b"\0" * 4)])
        with self.assertRaises(hloc.InputError):
            _hloc.run(self.TEXT, [("f32", [2**62, 2**62], b""), ("s32", [], b"\0" * 4)])

    def test_engine_refusals_are_located(self) -> None:
        # The JIT refuses complex values at the instruction, as `hloc run` does.
        text = "HloModule m\nENTRY e {\n  p = c64[2] parameter(0)\n  ROOT n = c64[2] negate(p)\n}\n"
        x = np.array([1 + 2j, 3 - 4j], np.complex64)
        with self.assertRaises(hloc.HloError) as cm:
            hloc.run(text, [x], path="complex.hlo")
        self.assertEqual((cm.exception.line, cm.exception.column), (3, 3))
        with tempfile.TemporaryDirectory() as d:
            f, npz = Path(d, "complex.hlo"), Path(d, "in.npz")
            f.write_text(text)
            np.savez(npz, p0=x)
            out = cli("run", str(f), "--inputs", str(npz))
            self.assertEqual(out.returncode, 1)
            self.assertEqual(str(cm.exception), out.stderr.rstrip("\n").replace(str(f), "complex.hlo"))
        (y,) = hloc.run(text, [x], engine="interp")
        np.testing.assert_array_equal(y, -x)


class Predict(unittest.TestCase):
    def test_report_equals_compile_json_on_every_sharded_corpus_program(self) -> None:
        # Every corpus module that carries shardings: each case's JAX module and its
        # debug, propagated, Shardy (`.sdy`) and XLA-partitioned (`.opt`) forms.
        n = 0
        files = sorted(f for f in CORPUS.glob("*.hlo") if "sharding=" in f.read_text())
        self.assertGreaterEqual(len(files), 20)
        for f in files:
            meta = json.loads((CORPUS / (f.name.split(".")[0] + ".json")).read_text())
            chips = len(meta["sharding"]["mesh"]["devices"])
            for chip, extra in (("v4", {}), ("v5p", {"slices": 2, "model_flops": 1e6})):
                with self.subTest(case=f.name, chip=chip):
                    args = ["compile", str(f), "--config", chip, "--chips", str(chips), "--json"]
                    if extra:
                        args += ["--slices", "2", "--model-flops", "1e6"]
                    out = cli(*args)
                    self.assertEqual(out.returncode, 0, out.stderr)
                    want = json.loads(out.stdout)
                    r = hloc.predict(f.read_text(), chips=chips, chip=chip, **extra)  # type: ignore[arg-type]
                    got = r.to_dict()
                    # The peak resident memory of the process that simulated: each its own.
                    self.assertIsInstance(got.pop("peak_rss_bytes"), int)
                    want.pop("peak_rss_bytes")
                    self.assertEqual(got, want)
                    self.check_properties(r)
                    n += 1
        self.assertEqual(n, 2 * len(files))

    def check_properties(self, r: hloc.Report) -> None:
        d = r.to_dict()
        self.assertEqual(r.step_time_us, d["step_time_us"])
        self.assertGreater(r.step_time_us, 0)
        self.assertEqual(r.compute_us, d["compute_cycles"] / d["clock_hz"] * 1e6)
        self.assertEqual(r.exposed_comm_us, d["exposed_comm_cycles"] / d["clock_hz"] * 1e6)
        self.assertAlmostEqual(r.compute_us + r.exposed_comm_us, r.step_time_us, delta=1e-6 * r.step_time_us + 1e-3)
        self.assertEqual(r.hbm_peak_bytes, d["hbm_peak_bytes"])
        self.assertEqual(r.hbm_capacity_bytes, d["hbm_capacity_bytes"])
        self.assertEqual(r.hbm_fits, d["hbm_fits"])
        self.assertEqual(r.hfu_pct, d["hfu_pct"])
        self.assertEqual(r.mfu_pct, d.get("mfu_pct"))
        self.assertEqual(r.chips, d["chips"])
        self.assertEqual(r.collectives, d["collectives"])
        self.assertEqual(r.per_op, d["per_op"])
        self.assertTrue(r.per_op and all("cycles" in op for op in r.per_op))
        self.assertIn("step", repr(r))
        try:
            import pandas  # noqa: F401
        except ImportError:
            with self.assertRaisesRegex(ImportError, "pandas"):
                r.to_pandas()
        else:
            self.assertEqual(len(r.to_pandas()), len(r.per_op))

    def test_bad_arguments_raise(self) -> None:
        text = (CORPUS / "sharded_mlp_train.hlo").read_text()
        for kw in ({"chips": 0}, {"chips": 8, "slices": 3}, {"chips": 8, "chip": "v9"}, {"chips": 8, "topology": "3x3"}):
            with self.subTest(**kw), self.assertRaises(hloc.InputError):
                hloc.predict(text, **kw)  # type: ignore[arg-type]
        # Devices the shardings do not have: the driver's located error.
        with self.assertRaises(hloc.HloError) as cm:
            hloc.predict(text, chips=4)
        out = cli("compile", str(CORPUS / "sharded_mlp_train.hlo"), "--chips", "4", "--json")
        self.assertEqual(out.returncode, 1)
        self.assertEqual(str(cm.exception), out.stderr.rstrip("\n").replace(str(CORPUS / "sharded_mlp_train.hlo"), "<string>"))


class Optimize(unittest.TestCase):
    def test_output_equals_hloc_opt_and_parses(self) -> None:
        for name, passes in (
            ("softmax", None),
            ("layernorm", None),
            ("train_mlp_sgd", None),
            ("sharded_mlp_train", None),
            ("train_cnn_sgd", ["inline-calls", "algebraic-simplifier", "dce"]),
            ("reduce_mean_var", []),
        ):
            f = CORPUS / f"{name}.hlo"
            with self.subTest(case=name, passes=passes):
                args = ["opt", str(f)] + (["--passes", ",".join(passes)] if passes else [])
                if passes == []:
                    continue  # `hloc opt --passes ""` names no pass; checked below without the CLI
                out = cli(*args)
                self.assertEqual(out.returncode, 0, out.stderr)
                got = hloc.optimize(f.read_text(), passes)
                self.assertEqual(got, out.stdout)
                hloc.check(got)  # the printed module is valid again
        # No passes: the module as printed, unchanged.
        text = (CORPUS / "reduce_mean_var.hlo").read_text()
        once = hloc.optimize(text, [])
        self.assertEqual(hloc.optimize(once, []), once)

    def test_pass_names_and_errors(self) -> None:
        self.assertIn("dce", hloc.passes())
        self.assertTrue(set(hloc.default_passes()) <= set(hloc.passes()))
        text = (CORPUS / "softmax.hlo").read_text()
        with self.assertRaisesRegex(ValueError, "unknown pass `no-such-pass`"):
            hloc.optimize(text, ["dce", "no-such-pass"])
        with self.assertRaises(hloc.InputError):
            hloc.optimize(text, "dce")
        with self.assertRaises(hloc.InputError):
            hloc.optimize(text, ["all-reduce-combiner"])
        with self.assertRaises(hloc.HloError):
            hloc.optimize(text.replace("f32", "f33", 1))


STEP = """HloModule step

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  w = f32[4] parameter(0)
  x = f32[4] parameter(1)
  d = f32[4] subtract(w, x)
  sq = f32[4] multiply(d, d)
  zero = f32[] constant(0)
  loss = f32[] reduce(sq, zero), dimensions={0}, to_apply=add
  lr = f32[] constant(0.2)
  lrb = f32[4] broadcast(lr), dimensions={}
  g = f32[4] multiply(d, lrb)
  w2 = f32[4] subtract(w, g)
  ROOT t = (f32[], f32[4]) tuple(loss, w2)
}
"""


class TrainSteps(unittest.TestCase):
    def test_state_stays_resident_and_equals_run(self) -> None:
        w = np.array([0.0, 1.0, -2.0, 0.5], np.float32)
        x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
        step = hloc.TrainStep(STEP, [w], names=["w"])
        before = hloc.jit_cache_stats()
        first = step.step([x])
        # The same step by hand: one `run` with the state passed in.
        loss, w1 = hloc.run(STEP, [w, x])
        self.assertEqual(np.float32(first).tobytes(), loss.tobytes())
        self.assertEqual(step.state[0].tobytes(), w1.tobytes())
        for _ in range(10):
            last = step.step([x])
        self.assertLess(last, first / 50)  # each step scales the loss by 0.64
        self.assertEqual(step.steps, 11)
        self.assertEqual(step.names, ["w"])
        self.assertEqual(len(step.outputs), 2)
        # One compile for the shapes (the `run` above hit the same cache entry).
        self.assertEqual(hloc.jit_cache_stats()["misses"] - before["misses"], 1)
        with tempfile.TemporaryDirectory() as d:
            ck = Path(d, "w.safetensors")
            step.save(ck)
            resumed = hloc.TrainStep(STEP, [w], names=["w"])
            self.assertEqual(resumed.restore(ck), 11)
            self.assertEqual(resumed.state[0].tobytes(), step.state[0].tobytes())
            self.assertEqual(resumed.step([x]), step.step([x]))
            ck.write_bytes(b"not a checkpoint")
            with self.assertRaises(hloc.HloError):
                resumed.restore(ck)

    def test_bad_state_and_batch_raise(self) -> None:
        w = np.zeros(4, np.float32)
        with self.assertRaisesRegex(hloc.InputError, "state 0: the step's parameter 0 is f32\\[4\\], given f32\\[3\\]"):
            hloc.TrainStep(STEP, [np.zeros(3, np.float32)])
        with self.assertRaisesRegex(hloc.InputError, "no batch parameters left"):
            hloc.TrainStep(STEP, [w, w])
        with self.assertRaises(hloc.InputError):
            hloc.TrainStep(STEP, [w], names=["a", "b"])
        step = hloc.TrainStep(STEP, [w])
        with self.assertRaisesRegex(hloc.InputError, "p1: expected f32\\[4\\], got f32\\[5\\]"):
            step.step([np.zeros(5, np.float32)])
        with self.assertRaises(hloc.InputError):
            step.step([])
        self.assertEqual(step.steps, 0)
        self.assertEqual(step.state[0].tolist(), [0.0] * 4)


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter (JAX's device count is fixed once it starts)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}
    )


JAX_MLP = """
import hloc, numpy as np
import jax, jax.numpy as jnp
from jax.sharding import PartitionSpec as P

def step(w1, w2, x, y):
    def loss(w1, w2):
        h = jnp.maximum(x @ w1, 0.0)
        return jnp.mean((h @ w2 - y) ** 2)
    g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2)
    return w1 - 0.1 * g1, w2 - 0.1 * g2

S = jax.ShapeDtypeStruct
args = (S((32, 64), jnp.float32), S((64, 8), jnp.float32), S((16, 32), jnp.float32), S((16, 8), jnp.float32))
"""


SMALL_DECODER = {"family": "decoder-lm", "layers": 2, "emb": 256, "heads": 4, "head_dim": 64,
                 "mlp": 1024, "vocab": 1024, "seq": 128, "remat": "full"}


class Plan(unittest.TestCase):
    def test_plan_equals_the_cli_field_for_field(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            model = Path(d) / "model.json"
            model.write_text(json.dumps(SMALL_DECODER))
            cache = str(Path(d) / "cache")
            svg = Path(d) / "plan.svg"
            p = hloc.plan(model=SMALL_DECODER, chip="v5p", chips=8, global_batch=16,
                          tensor=[1, 2], remat=["full", "minimal"], max_accum=2, cache=cache,
                          svg=str(svg))
            out = cli("plan", "--model", str(model), "--chip", "v5p", "--chips", "8",
                      "--global-batch", "16", "--tensor", "1,2", "--remat", "full,minimal",
                      "--max-accum", "2", "--cache", cache, "--json")
            self.assertEqual(out.returncode, 0, out.stderr)
            want = json.loads(out.stdout)
            got = p.to_dict()
            # The wall time is each run's own; everything else is the same plan (the second
            # run reuses the first one's cached programs, the simulation is deterministic).
            for x in (got, want):
                x.pop("wall_s")
            self.assertEqual(got, want)
            self.assertTrue(svg.read_text().lstrip().startswith("<svg"))
        self.assertEqual(p.simulated, 8)
        self.assertEqual(p.pruned, 0)
        best = p.best
        self.assertIsNotNone(best)
        assert best is not None
        self.assertEqual(best, p.configurations[0])
        steps = [c["step_s"] for c in p.configurations if c["state"] == "fits"]
        self.assertEqual(steps, sorted(steps))
        self.assertIsNone(p.published, "a model without a row has no published configuration")
        self.assertIn("8 candidates, 8 simulated, 0 pruned", str(p))

    def test_bad_requests_raise_input_error_naming_the_constraint(self) -> None:
        cases = [
            (dict(row="maxtext-22b-1x-v4-128", tensor=[3]), "a tensor degree of 3 does not divide the 64 chips"),
            (dict(row="maxtext-22b-1x-v4-128", global_batch=100), "does not divide over 64 chips"),
            (dict(model=SMALL_DECODER, chip="v3", chips=8, global_batch=8), "unknown chip `v3`"),
            (dict(model=SMALL_DECODER, chip="v5p", chips=12, slices=5, global_batch=12), "do not split into 5 equal slices"),
            (dict(model={"family": "unet-diffusion"}, chip="v5p", chips=8, global_batch=8), "model family `unet-diffusion`"),
            (dict(row="maxtext-22b-1x-v4-128", remat=["offload"]), "unknown remat policy `offload`"),
        ]
        for kwargs, want in cases:
            with self.assertRaises(hloc.InputError, msg=str(kwargs)) as e:
                hloc.plan(**kwargs)  # type: ignore[arg-type]
            self.assertIn(want, str(e.exception))
            self.assertIsInstance(e.exception, ValueError)


class Jax(unittest.TestCase):
    def test_import_hloc_does_not_import_jax(self) -> None:
        out = python("import sys, hloc; hloc.check('HloModule m\\nENTRY e {\\n  ROOT c = f32[] constant(1)\\n}\\n'); print('jax' in sys.modules)")
        self.assertEqual(out.stdout.strip(), "False", out.stderr)

    def test_sharded_mlp_on_4_host_devices(self) -> None:
        code = JAX_MLP + """
r = hloc.jax.predict(step, *args, mesh_shape={"data": 2, "model": 2},
                     in_shardings=(P(None, "model"), P("model", None), P("data", None), P("data", None)),
                     out_shardings=(P(None, "model"), P("model", None)), model_flops=1e6)
import json
print(json.dumps({"step": r.step_time_us, "chips": r.chips, "config": r.to_dict()["config"],
                  "collectives": r.collectives, "mfu": r.mfu_pct, "devices": len(jax.devices())}))
"""
        out = python(code, XLA_FLAGS="")
        self.assertEqual(out.returncode, 0, out.stderr)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertGreater(got["step"], 0)
        self.assertEqual(got["chips"], 4)
        self.assertEqual(got["devices"], 4, "hloc.jax asks JAX for the mesh's host devices")
        self.assertIn("v5p", got["config"])
        self.assertTrue(got["collectives"], "a model-parallel step has collectives")
        self.assertIsNotNone(got["mfu"])

    def test_plan_ranks_every_mesh_and_each_equals_predict(self) -> None:
        code = JAX_MLP + """
def step_for(mesh):
    if mesh["model"] == 4:
        raise ValueError("the hidden layer is not split 4 ways")
    return step, args, (P(None, "model"), P("model", None), P("data", None), P("data", None)), \
        (P(None, "model"), P("model", None))
plan = hloc.jax.plan(step_for, chips=4, axes=("data", "model"), chip="v5p", model_flops=1e6)
rows = []
for c in plan.candidates:
    row = {k: v for k, v in c.items() if k != "report"}
    if "report" in c:
        m = c["mesh_shape"]
        again = hloc.jax.predict(step, *args, mesh_shape=m,
                                 in_shardings=(P(None, "model"), P("model", None), P("data", None), P("data", None)),
                                 out_shardings=(P(None, "model"), P("model", None)), model_flops=1e6)
        a, b = c["report"].to_dict(), again.to_dict()
        a.pop("peak_rss_bytes"); b.pop("peak_rss_bytes")
        row["same_as_predict"] = a == b
    rows.append(row)
print(json.dumps({"rows": rows, "best": plan.best["mesh_shape"], "text": str(plan)}))
try:
    hloc.jax.plan(step_for, chips=4, axes=("data", "model"), sizes={"model": [3]})
except hloc.InputError as e:
    print("ERROR", e)
"""
        out = python("import json\n" + code, XLA_FLAGS="")
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.strip().splitlines()
        got = json.loads(lines[-2])
        meshes = [r["mesh_shape"] for r in got["rows"]]
        self.assertEqual(sorted(tuple(m.values()) for m in meshes), [(1, 4), (2, 2), (4, 1)])
        simulated = [r for r in got["rows"] if r["state"] in ("fits", "does not fit")]
        self.assertEqual(len(simulated), 2, got)
        self.assertTrue(all(r["same_as_predict"] for r in simulated), got)
        steps = [r["step_time_us"] for r in simulated]
        self.assertEqual(steps, sorted(steps))
        self.assertEqual(got["rows"][-1]["state"], "skipped")
        self.assertIn("not split 4 ways", got["rows"][-1]["error"])
        self.assertEqual(got["best"], simulated[0]["mesh_shape"])
        self.assertIn("sizes [3] of axis 'model' do not divide 4 chips", lines[-1])

    def test_too_few_host_devices_says_how_to_get_them(self) -> None:
        code = JAX_MLP + """
jax.devices()  # JAX started with one host device
try:
    hloc.jax.predict(step, *args, mesh_shape={"data": 4}, in_shardings=None, out_shardings=None)
except RuntimeError as e:
    print("ERROR", e)
"""
        out = python(code, XLA_FLAGS="")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("XLA_FLAGS=--xla_force_host_platform_device_count=4", out.stdout)

    def test_without_jax_a_clear_import_error(self) -> None:
        code = """
import sys
sys.modules["jax"] = None  # as if JAX were not installed
import hloc
try:
    hloc.jax.predict(lambda x: x, mesh_shape={"d": 1}, in_shardings=None, out_shardings=None)
except ImportError as e:
    print("ERROR", e)
"""
        out = python(code)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("hloc.jax.predict needs JAX", out.stdout)


if __name__ == "__main__":
    unittest.main()
