"""`minirag models ...`: bake, verify, import and list the baked embedding models.

Mounted by appliance/adapters/cli.py as `app.add_typer(models_app, name="models")`.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from appliance.config import Environment, read_environment
from appliance.errors import ApplianceError, ModelCorrupt, ModelMissing
from appliance.models.manifest import Manifest

models_app = typer.Typer(add_completion=False, rich_markup_mode=None, no_args_is_help=True,
                         help="Bake, verify, import and list the embedding models.")

Ids = Annotated[list[str] | None, typer.Argument(help="Model ids (default: the manifest's default set).")]
ModelsDir = Annotated[Path | None, typer.Option(
    "--models-dir", help="Baked models directory (default: MODELS_DIR, else <checkout>/models/baked).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


@models_app.callback()
def _root(ctx: typer.Context) -> None:
    if not isinstance(ctx.obj, Environment):  # run on its own (a test's CliRunner), not under `minirag`
        ctx.obj = read_environment()


def _environment(ctx: typer.Context) -> Environment:
    environment = ctx.find_object(Environment)
    assert environment is not None, "the models app's callback reads the environment before any command"
    return environment


def resolve_models_dir(option: Path | None, environment: Environment) -> Path:
    """--models-dir, else MODELS_DIR, else default_models_dir()."""
    from appliance.models.manifest import default_models_dir

    if option is not None:
        return option
    return Path(environment.models_dir) if environment.models_dir else default_models_dir()


def _manifest(environment: Environment, models_dir: Path) -> Manifest:
    from appliance.models.manifest import load_manifest

    return load_manifest(models_dir=models_dir, models_manifest=environment.models_manifest)


@contextmanager
def _errors_reported(as_json: bool) -> Iterator[None]:
    try:
        yield
    except ApplianceError as exc:
        if as_json:
            sys.stdout.write(json.dumps({"error": exc.to_dict()}, indent=2) + "\n")
        else:
            typer.echo(f"error: {exc.message}", err=True)
            if exc.hint:
                typer.echo(f"hint: {exc.hint}", err=True)
        raise typer.Exit(1) from None


def _print(data: object, as_json: bool, lines: list[str]) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n" if as_json else "".join(line + "\n" for line in lines))


@models_app.command()
def bake(ctx: typer.Context, ids: Ids = None,
         force: Annotated[bool, typer.Option("--force", help="Re-bake even if present and intact.")] = False,
         models_dir: ModelsDir = None,
         from_dir: Annotated[Path | None, typer.Option(
             "--from-dir", help="Copy the files from this folder instead of fetching.")] = None,
         hub_cache: Annotated[Path | None, typer.Option(
             "--hub-cache", help="Local hub cache (default: HF_HUB_CACHE).")] = None,
         as_json: AsJson = False) -> None:
    """Materialise models into the models directory (downloads only here, never at run time)."""
    from appliance.models.bake import bake as bake_models, hub_cache_dir

    environment = _environment(ctx)
    with _errors_reported(as_json):
        target = resolve_models_dir(models_dir, environment)
        results = bake_models(ids or None, target, force=force, manifest=_manifest(environment, target),
                              from_dir=from_dir, cache_dir=environment.minirag_cache,
                              hub_cache=hub_cache_dir(hub_cache, hf_hub_cache=environment.hf_hub_cache,
                                                      hf_home=environment.hf_home),
                              hf_endpoint=environment.hf_endpoint)
    _print([{"id": r.id, "path": str(r.path), "status": r.status} for r in results], as_json,
           [f"{r.status:8}  {r.id}  {r.path}" for r in results])


@models_app.command()
def verify(ctx: typer.Context, ids: Ids = None, models_dir: ModelsDir = None, as_json: AsJson = False) -> None:
    """Re-hash every baked file against the manifest."""
    from appliance.models.bake import verify as verify_models

    environment = _environment(ctx)
    with _errors_reported(as_json):
        target = resolve_models_dir(models_dir, environment)
        paths = verify_models(target, ids or None, manifest=_manifest(environment, target))
    _print([{"path": str(p), "status": "ok"} for p in paths], as_json, [f"ok  {p}" for p in paths])


@models_app.command("import")
def import_(ctx: typer.Context,
            model_id: Annotated[str, typer.Argument(metavar="ID", help="Manifest id of the model.")],
            from_dir: Annotated[Path, typer.Option(
                "--from", help="Folder holding the model's files (e.g. a USB stick).")],
            models_dir: ModelsDir = None, as_json: AsJson = False) -> None:
    """Copy a model folder into the models directory, verifying each file against the manifest."""
    from appliance.models.bake import import_dir

    environment = _environment(ctx)
    with _errors_reported(as_json):
        target = resolve_models_dir(models_dir, environment)
        result = import_dir(model_id, from_dir, target, manifest=_manifest(environment, target))
    _print({"id": result.id, "path": str(result.path), "status": result.status}, as_json,
           [f"{result.status}  {result.id}  {result.path}"])


@models_app.command("list")
def list_(ctx: typer.Context, models_dir: ModelsDir = None, as_json: AsJson = False) -> None:
    """The manifest's models and whether each is baked (files present, recorded hashes match)."""
    from appliance.models.bake import check_baked

    environment = _environment(ctx)
    with _errors_reported(as_json):
        target = resolve_models_dir(models_dir, environment)
        manifest = _manifest(environment, target)
    rows = []
    for spec in manifest.models.values():
        try:
            check_baked(spec, target, full=False)
            state = "baked"
        except ModelMissing:
            state = "missing"
        except ModelCorrupt:
            state = "corrupt"
        rows.append({"id": spec.id, "dim": spec.dim, "max_seq_length": spec.max_seq_length,
                     "source": spec.source_kind, "default": spec.id == manifest.default_id, "state": state})
    _print(rows, as_json, [f"{'*' if r['default'] else ' '} {r['state']:8} {r['id']}  ({r['source']}, dim {r['dim']}, "
                           f"max {r['max_seq_length']} tokens)" for r in rows])
