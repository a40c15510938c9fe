"""The task a benchmark's model serves, and the refusal of a task a benchmark does not time.

A model's task (hedgerow/model_files.py: embed, rerank or sparse) decides which calls it
answers, so each benchmark times the calls of the task it reads: from a running server's Info
(what it serves, authoritative), else from `--task`, else from the model directory's
config.json (as `hedgerow server --task auto` reads it). A `--task` that disagrees with the
server or the directory, or a task the benchmark has no calls for, is refused with one line
(ConfigError: `hedgerow bench` prints it and exits 2) before anything is timed.
"""

from pathlib import Path

import grpc

from hedgerow.errors import ConfigError
from hedgerow.model_files import TASKS, model_task, read_object, readable
from hedgerow.wire import embed_pb2, embed_pb2_grpc

CHOICES = ("auto", *TASKS)


def directory_task(directory: Path) -> str:
    """The task of the checkpoint in `directory` (sparse is never read from it: it is asked)."""
    with readable(directory):
        return model_task(read_object(directory / "config.json"), directory / "config.json")


def server_task(address: str) -> tuple[str, str]:
    """(model name, task) of the server at `address`, from its Info call."""
    with grpc.insecure_channel(address) as channel:
        info = embed_pb2_grpc.EmbedderStub(channel).Info(embed_pb2.InfoRequest(), timeout=30)
    return info.model, info.task or "embed"


def resolve(asked: str, directory: Path | None, address: str | None) -> str:
    """The task to time: a running server's at `address`, else `asked`, else (auto) the
    checkpoint's in `directory` (whose tokenizer the benchmark encodes with); ConfigError when
    `asked` or the directory's checkpoint names another task than the server's."""
    # sparse is never read from a checkpoint: a sparse model's directory reads as embed
    if address:
        model, task = server_task(address)
        if asked not in ("auto", task):
            raise ConfigError(f"--task {asked}, but the server at {address} serves model "
                              f"{model!r} of task {task}")
        own = directory_task(directory) if directory is not None else task
        if own != task and not (task == "sparse" and own == "embed"):
            raise ConfigError(f"the server at {address} serves model {model!r} of task {task}, "
                              f"the model directory {directory} is of task {own}: give the "
                              "served model's directory (its tokenizer encodes the requests)")
        return task
    own = directory_task(directory) if directory is not None else "embed"
    if asked not in ("auto", own) and not (asked == "sparse" and own == "embed"):
        raise ConfigError(f"--task {asked}, but the model directory {directory} is of task "
                          f"{own}")
    return own if asked == "auto" else asked


def refuse(benchmark: str, task: str, timed: tuple[str, ...], instead: str) -> None:
    """ConfigError unless `benchmark` times calls of `task` (one of `timed`)."""
    if task not in timed:
        raise ConfigError(f"{benchmark} times the calls of a model of task "
                          f"{' or '.join(timed)}; this model is of task {task}: {instead}")
