"""Type stub of the native module ``hloc._hloc`` (tools/python/src/lib.rs).

Use the package (``import hloc``): it converts numpy arrays, issues warnings and wraps the
JSON report. Arrays cross as ``(HLO element type, dims, bytes)``; each function returns
the warnings the command line would print (``""`` when none) beside its result. Errors
raise ``hloc.HloError`` or ``hloc.InputError``.
"""

NativeArray = tuple[str, list[int], bytes]
NativeOutput = tuple[str, list[int], bytearray]

def check(text: str, path: str = "<string>") -> str:
    """``hloc check``: returns the warnings; raises ``HloError`` on any error."""

def pass_names() -> tuple[list[str], list[str]]:
    """Every pass ``optimize`` can name, and the default pipeline's order."""

def optimize(text: str, passes: list[str] | None = None, path: str = "<string>") -> tuple[str, str]:
    """``hloc opt [--passes ...]``: the printed module and the warnings and notes."""

def jit_cache_stats() -> tuple[int, int, float]:
    """The process-wide JIT cache: hits, misses, total compile time in ms."""

def run(
    text: str,
    inputs: list[NativeArray],
    engine: str = "jit",
    devices: int = 1,
    chip: str = "v4",
    path: str = "<string>",
) -> tuple[list[NativeOutput], str]:
    """``hloc run --engine ENGINE [--devices N]``: the outputs and the warnings."""

def predict(
    text: str,
    chips: int,
    chip: str = "v4",
    slices: int | None = None,
    model_flops: float | None = None,
    topology: str | None = None,
    path: str = "<string>",
) -> tuple[str, str]:
    """``hloc compile --config CHIP --chips N --json``: the JSON object (text) and the warnings."""

def plan(args: list[str]) -> str:
    """``hloc plan ARGS --json``: the plan's JSON object (text)."""

class TrainStep:
    """``hlo_runtime::TrainStep``: a JIT-compiled step with resident state."""

    def __init__(self, text: str, state: list[NativeArray], names: list[str] | None = None, path: str = "<string>") -> None: ...
    def step(self, batch: list[NativeArray]) -> float:
        """One step on the batch; the loss."""
    def state(self) -> list[NativeOutput]:
        """The current state."""
    def outputs(self) -> list[NativeOutput]:
        """The last step's outputs."""
    def steps(self) -> int:
        """How many steps ran."""
    def names(self) -> list[str]:
        """The state tensors' names."""
    def save(self, file: str) -> None:
        """Writes a safetensors checkpoint."""
    def restore(self, file: str) -> int:
        """Reads a checkpoint; the step count."""
