"""Training from a run config (docs/run-config.md), exactly as `nabla run`
does it: the same passes, datasets, checkpoints (and numbered run folders),
metrics files and plots, with the progress bar only on a terminal.

    summary = nabla.train.run("examples/fashion_mnist_mlp.yaml", epochs=1)
    summary["eval"]["accuracy"]
"""
import json as _json
import os as _os

from . import _nabla

_OVERRIDES = ("steps", "epochs", "resume", "progress", "weights")
_PROGRESS = ("auto", "bar", "lines", "none")  # nabla run --progress


def _to_yaml(mapping, indent=0):
    """Block-style YAML: mappings nest by indentation, every other value is
    JSON (valid YAML flow). Block style because the parser keeps an inline
    `program:` mapping as the lines below its key, for positions in messages."""
    lines = []
    for key, value in mapping.items():
        head = " " * indent + _json.dumps(str(key)) + ":"
        if isinstance(value, dict) and value:
            lines.append(head)
            lines += _to_yaml(value, indent + 2)
        else:
            lines.append(head + " " + _json.dumps(value))
    return lines


def world():
    """(rank, size): this process's place among the ranks an MPI launcher
    (mpirun -np N) started, (0, 1) without one. Under mpirun,
    append_backward inserts the gradient allreduces; each rank then feeds its
    share of every batch (rows rank::size, say) and all ranks apply the same
    summed gradient, as `nabla run` does."""
    return _nabla._world()


def run(config, **overrides):
    """Runs the run config `config` (a path, or a dict with the keys of a
    config file, whose relative inputs are resolved against the current
    folder) and returns its summary as a dict: steps, epochs, train and eval
    ({loss, accuracy, samples}), seconds, samples_per_sec, last_checkpoint,
    run (its number) with checkpoint_dir, metrics_file and plot, world_size
    and stopped_by_signal.

    Overrides are `nabla run`'s flags: steps=N, epochs=N, resume=True,
    progress="auto"|"bar"|"lines"|"none", weights="FILE.safetensors".

    Ctrl-C (SIGINT) stops the run after the step under way, writes a
    checkpoint (continue with resume=True) and raises KeyboardInterrupt; the
    interpreter's own handler is back in place when it returns. The steps run
    without the GIL."""
    unknown = sorted(set(overrides) - set(_OVERRIDES))
    if unknown:
        raise TypeError(f"nabla.train.run: unknown override {', '.join(unknown)}; expected {', '.join(_OVERRIDES)}")
    path = text = None
    if isinstance(config, dict):
        text = "\n".join(_to_yaml(config)) + "\n"
    elif isinstance(config, (str, bytes, _os.PathLike)):
        path = _os.fsdecode(config)
    else:
        raise TypeError(f"nabla.train.run: config must be a path or a dict, but received {type(config).__name__}")
    # Checked as `nabla run` checks its flags: "fancy" or resume="no" would
    # otherwise run (with the default display, or resuming).
    progress = overrides.get("progress")
    if progress is not None and progress not in _PROGRESS:
        raise ValueError(f"nabla.train.run: progress must be one of {', '.join(_PROGRESS)}, but received {progress!r}")
    resume = overrides.get("resume", False)
    if not isinstance(resume, bool):
        raise TypeError(f"nabla.train.run: resume must be True or False, but received {resume!r}")
    weights = overrides.get("weights")
    summary = _nabla._train_run(
        path,
        text,
        _os.getcwd(),
        overrides.get("steps"),
        overrides.get("epochs"),
        resume,
        progress,
        None if weights is None else _os.fsdecode(weights),
    )
    if summary["stopped_by_signal"] == "SIGINT":
        where = summary["last_checkpoint"] or "no checkpoint"
        raise KeyboardInterrupt(f"nabla.train.run stopped after step {summary['steps']}; {where}")
    return summary
