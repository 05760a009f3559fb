"""The ``ehrxqa`` command: generate or validate a source, build the datasets, open the UI, score predictions,
compare two releases."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import warnings
from pathlib import Path

from ehrxqa_pipeline.config import HOME_ENV, SOURCE_ENV, Settings, check_environment, check_home
from ehrxqa_pipeline.sources.layout import VERSIONS_ENV

# The instance of an EHRXQA_HOME, in blocks: prepare_instance adds a block missing from a dagster.yaml that an
# older `ehrxqa` wrote (a block of the user's own under that name stays as it is).
DAGSTER_YAML_BLOCKS = {
    "telemetry": "telemetry:\n  enabled: false\n",
    "nux": "nux:\n  enabled: false       # no first-visit newsletter modal in the UI\n",
    "concurrency": """\
concurrency:
  pools:
    default_limit: 1   # any pool without its own limit: one step at a time across runs
# The pools `duckdb` (single writer), `gpu` and `llm` get explicit limits of 1 in the instance database
# (ehrxqa_pipeline/cli/instance.py POOL_LIMITS); change them with `dagster instance concurrency set POOL N`.
""",
    "storage": """\
# Dagster's SQLite storage (the same files under DAGSTER_HOME) with its connections kept open between uses
storage:
  custom:
    module: ehrxqa_pipeline.cli.dagster_private
    class: PooledSqliteStorage
    config:
      base_dir:
        env: DAGSTER_HOME
""",
}
_STORAGE_KEYS = ("storage", "run_storage", "event_log_storage", "schedule_storage")  # a user's storage of any form
DAGSTER_YAML = "# Written by `ehrxqa`; the instance of this EHRXQA_HOME.\n" + "".join(DAGSTER_YAML_BLOCKS.values())


def _settings(args, home_check: bool = True) -> Settings:
    """Every setting checked before any work (``config.check_environment``), EHRXQA_HOME writable and with room
    (``config.check_home``): a bad one is one line naming it, and exit status 2."""
    try:
        check_environment()
        settings = Settings.resolve(getattr(args, "home", None), getattr(args, "source_root", None),
                                    source_versions=getattr(args, "source_version", None))
        if settings.source_root is not None and not settings.source_root.is_dir():
            raise ValueError(f"{SOURCE_ENV}={settings.source_root} is not a folder: point it at the folder that "
                             "holds mimiciv/, mimic-cxr-jpg/ and chest-imagenome/ (or leave it unset for the "
                             "synthetic source)")
        if home_check:
            check_home(settings.home)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    return settings


def _clean_leftovers(settings: Settings, log=print) -> None:
    """Remove the temporary files a killed build left under EHRXQA_HOME (hidden ``.NAME.HOST-PID.*.tmp`` of a
    dead process; ``atomic.remove_stale_temps``), before anything is written. Needs the build lock."""
    from ehrxqa_pipeline.atomic import remove_stale_temps

    removed = remove_stale_temps(settings.home, skip=("source", "dagster"))
    if removed:
        size = sum(b for _, b in removed)
        log(f"removed {len(removed)} temporary file(s) ({size / 2**20:.1f} MiB) left by an interrupted build: "
            + ", ".join(str(p.relative_to(settings.home)) for p, _ in removed[:5])
            + (", ..." if len(removed) > 5 else ""))


def prepare_instance(settings: Settings) -> None:
    """Point Dagster at EHRXQA_HOME/dagster (a persistent instance) and export the settings to steps."""
    settings.dagster_home.mkdir(parents=True, exist_ok=True)
    cfg = settings.dagster_home / "dagster.yaml"
    from ehrxqa_pipeline.atomic import write_text

    text = cfg.read_text() if cfg.exists() else ""
    missing = [block for name, block in DAGSTER_YAML_BLOCKS.items()
               if not any(f"\n{key}:" in "\n" + text for key in (_STORAGE_KEYS if name == "storage" else (name,)))]
    if not text:
        write_text(cfg, DAGSTER_YAML)
    elif missing:
        write_text(cfg, text.rstrip("\n") + "\n" + "".join(missing))
    settings.export()


def ensure_source(settings: Settings, log=print) -> None:
    """With no EHRXQA_SOURCE_ROOT, generate the synthetic source once under EHRXQA_HOME/source."""
    from ehrxqa_pipeline.sources.schema import DEMO_MANIFEST

    if not settings.synthetic:
        if not settings.source_dir.is_dir():
            raise SystemExit(f"EHRXQA_SOURCE_ROOT={settings.source_dir} does not exist. Point it at the "
                             "folder that holds mimiciv/, mimic-cxr-jpg/ and chest-imagenome/.")
        return
    if (settings.source_dir / DEMO_MANIFEST).exists():
        return
    from ehrxqa_pipeline.demo.generate import generate_source

    log(f"No EHRXQA_SOURCE_ROOT set: generating the synthetic source in {settings.source_dir}")
    generate_source(settings.source_dir, seed=settings.seed, force=True, log=lambda m: log("  " + m))


def cmd_demo_source(args) -> int:
    from ehrxqa_pipeline.demo.generate import generate_source

    start = time.perf_counter()
    try:
        manifest = generate_source(Path(args.out), seed=args.seed, scale=args.scale, patients=args.patients,
                                   images=False if args.no_images else None, force=args.force,
                                   withheld_share=args.withheld_share)
    except (FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({sum(manifest['rows'].values())} rows, {manifest['images_written']} images) "
          f"in {time.perf_counter() - start:.1f}s")
    return 0


def cmd_validate_source(args) -> int:
    from ehrxqa_pipeline.sources.validate import validate_source

    try:
        versions = Settings.resolve(source_versions=args.source_version).source_versions
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from ehrxqa_pipeline.sources.layout import SourceLayout

    report = validate_source(SourceLayout(Path(args.root), dict(versions)))
    print(report.format())
    return 0 if report.ok else 1


def _configure_pools() -> None:
    import dagster as dg

    from ehrxqa_pipeline.cli.instance import configure_pools

    with dg.DagsterInstance.get() as instance:
        configure_pools(instance)


def _run_config(path: str) -> dict:
    """The run config of ``--config FILE`` (YAML, as in the UI's launchpad), checked against the asset job
    before any work: a file that is missing, not YAML or not valid config is one line naming it (exit 2)."""
    import yaml

    try:
        config = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        print(f"error: --config {path}: {' '.join(str(err).split())}", file=sys.stderr)
        raise SystemExit(2) from None
    import dagster as dg

    from ehrxqa_pipeline.definitions import defs

    job = defs.resolve_implicit_global_asset_job_def()
    try:
        ops = config.get("ops") if isinstance(config, dict) else None
        unknown = sorted(set(ops) - {node.name for node in job.graph.nodes}) if isinstance(ops, dict) else []
        if unknown:  # the asset job's config schema lets unknown ops through
            raise ValueError(f"no asset or check is named {', '.join(unknown)} (an op is named after its asset "
                             "key, ehrxqa/silver -> ehrxqa__silver)")
        dg.validate_run_config(job, config or {})
    except (ValueError, dg.DagsterInvalidConfigError) as err:
        problems = "; ".join(e.message for e in getattr(err, "errors", ())) or str(err)
        print(f"error: --config {path} is not valid run config: {problems} (e.g. ops: {{ehrxqa__silver: "
              "{config: {train_valid_cap: 8, test_cap: 2}}})", file=sys.stderr)
        raise SystemExit(2) from None
    return config or {}


def cmd_build(args) -> int:
    from ehrxqa_pipeline import workers
    from ehrxqa_pipeline.cli.build import build, format_summary
    from ehrxqa_pipeline.hashing import DIGESTS_FILE, remembering
    from ehrxqa_pipeline.threads import steps_run_alone

    if args.changed and args.select:
        print("error: --changed materializes what changed anywhere; it takes no --select", file=sys.stderr)
        return 2
    settings = _settings(args)
    run_config = _run_config(args.config) if args.config else None
    if args.select:
        from ehrxqa_pipeline.cli.build import SelectionError, check_selection
        from ehrxqa_pipeline.definitions import defs

        try:
            check_selection(defs, args.select)
        except SelectionError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    from ehrxqa_pipeline.cli.lock import BUSY_EXIT, BuildLock, BuildLocked

    try:
        lock = BuildLock(settings.home).acquire()
    except BuildLocked as err:
        print(f"error: {err}", file=sys.stderr)
        return BUSY_EXIT
    # the worker server loads Great Expectations on another core meanwhile (``workers``), until the build ends
    with lock, workers.serving(workers.GX):
        if lock.previous:
            print(f"the previous build (pid {lock.previous.get('pid')}, started {lock.previous.get('started')}) "
                  "did not finish (killed?): cleaning up after it")
        _clean_leftovers(settings)
        prepare_instance(settings)
        import dagster as dg

        from ehrxqa_pipeline.cli.instance import configure_pools

        with dg.DagsterInstance.get() as instance:  # one for the whole command: each opening checks the schema
            configure_pools(instance)
            ensure_source(settings)
            from ehrxqa_pipeline import definitions, gc_settings

            definitions.defs.resolve_asset_graph()  # loaded and resolved first: then outside the collector's walks
            gc_settings.for_many_steps()
            # one step at a time in this process; release files hashed once (a digest kept while its file's
            # stat key holds), and from one build to the next
            with steps_run_alone(), remembering(settings.cache_dir / DIGESTS_FILE):
                summary = build(settings, select=args.select, changed=args.changed, run_config=run_config,
                                instance=instance)
    print(format_summary(summary, settings))
    return 0 if summary.success else 1


def cmd_dev(args) -> int:
    settings = _settings(args)
    prepare_instance(settings)
    _configure_pools()
    ensure_source(settings)
    from ehrxqa_pipeline.cli.launch import code_location

    exe = Path(sys.executable).with_name("dagster")
    argv = [str(exe), "dev", *code_location(), "--host", args.host, "--port", str(args.port)]
    print(f"Dagster UI on http://{args.host}:{args.port} (instance {settings.dagster_home})")
    os.execv(argv[0], argv)
    return 0


def cmd_cache_clear(args) -> int:
    from ehrxqa_pipeline.paraphrase.cache import FILE_NAME, LlmCache

    cache = LlmCache(_settings(args).cache_dir / FILE_NAME)
    rows = cache.statuses()
    if not cache.clear():
        print(f"no LLM answer cache at {cache.path}")
        return 0
    print(f"removed {cache.path} ({', '.join(f'{n} {s}' for s, n in rows.items()) or 'no answers'}): the next "
          "build asks the endpoint again for every template")
    return 0


def cmd_score(args) -> int:
    """Score a predictions file against the release (``vqa.score_file``): exit 2 with the file and the offending
    ids named when it cannot be scored."""
    import json

    from ehrxqa_pipeline.vqa.prediction_files import PredictionsError
    from ehrxqa_pipeline.vqa.score_file import ReleaseError, format_report, score_file

    if args.release is not None:
        release = Path(args.release)
    else:
        try:
            release = Settings.resolve(getattr(args, "home", None)).release_dir
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    try:
        result = score_file(args.predictions, release, dataset=args.dataset, split=args.split)
    except (PredictionsError, ReleaseError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2, sort_keys=True) if args.json else format_report(result), end="\n" if args.json
          else "")
    return 0


def cmd_changelog(args) -> int:
    """Print what changed between two release folders (``release.changelog``); exit 2 when one has no manifest."""
    from ehrxqa_pipeline.release.changelog import changelog, load_release

    try:
        old, new = load_release(Path(args.old)), load_release(Path(args.new))
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(changelog(old, new), end="")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ehrxqa", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo-source", help="write the synthetic source in the PhysioNet layout")
    d.add_argument("out")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--scale", choices=["demo", "full"], default="demo")
    d.add_argument("--patients", type=int, default=None, help="override the number of CXR patients")
    d.add_argument("--no-images", action="store_true", help="skip the phantom JPEGs")
    d.add_argument("--withheld-share", type=float, default=None,
                   help="share of the CXR patients left out of MIMIC-IV, as the real release does (default 0.05)")
    d.add_argument("--force", action="store_true", help="replace a non-empty OUT")
    d.set_defaults(func=cmd_demo_source)

    v = sub.add_parser("validate-source", help="check a PhysioNet root: files, columns, types, ids")
    v.add_argument("root")
    v.set_defaults(func=cmd_validate_source)

    b = sub.add_parser("build", help="materialize assets into the instance under EHRXQA_HOME")
    b.add_argument("--select", default=None, help="Dagster asset selection, e.g. 'group:ingest' or "
                   "'key:ingest/patients+'")
    b.add_argument("--changed", action="store_true", help="materialize only what changed since the last "
                   "build (source files, code versions, upstream data; what the automation sensor would run), "
                   "until nothing is due; with nothing changed it runs nothing")
    b.add_argument("--config", default=None, metavar="FILE", help="run config (YAML, as in the UI's launchpad) "
                   "of the configurable assets, e.g. EHRXQA sampling caps or the unanswerable opt-in: "
                   "'ops: {ehrxqa__silver: {config: {train_valid_cap: 8, unanswerable: 100}}}'")
    b.set_defaults(func=cmd_build)

    u = sub.add_parser("dev", help="open the Dagster UI on the persistent instance")
    u.add_argument("--host", default="127.0.0.1")
    u.add_argument("--port", type=int, default=3000)
    u.set_defaults(func=cmd_dev)

    c = sub.add_parser("cache", help="manage the caches under EHRXQA_HOME/cache")
    cc = c.add_subparsers(dest="cache_command", required=True)
    clear = cc.add_parser("clear", help="delete a cache")
    clear.add_argument("which", choices=["llm"], help="llm: the LLM answer cache (cache/llm_cache.duckdb)")
    clear.set_defaults(func=cmd_cache_clear)

    s = sub.add_parser("score", help="score a predictions file against the release's split file (paper metrics)")
    s.add_argument("predictions", metavar="PREDICTIONS.json",
                   help='[{"id": <record id>, "answer": [...] or null}, ...], one entry per item of the split')
    s.add_argument("--dataset", choices=["ehrxqa", "mimic-cxr-vqa"], default="ehrxqa",
                   help="ehrxqa: Acc_EX by modality and patient scope (and RS(c) with unanswerable items); "
                        "mimic-cxr-vqa: Acc and micro F1 by content and semantic type")
    s.add_argument("--split", choices=["train", "valid", "test"], default="test")
    s.add_argument("--release", default=None, metavar="DIR", help="the release folder (default: EHRXQA_HOME/release)")
    s.add_argument("--json", action="store_true", help="print the scores as JSON")
    s.add_argument("--home", default=None, help=f"overrides ${HOME_ENV}: scores against its release/")
    s.set_defaults(func=cmd_score)

    g = sub.add_parser("changelog", help="what changed between two release folders (markdown): build facts, "
                       "records per split, templates added / removed / changed, per-template counts, files")
    g.add_argument("old", metavar="OLD_RELEASE_DIR")
    g.add_argument("new", metavar="NEW_RELEASE_DIR")
    g.set_defaults(func=cmd_changelog)

    for sp in (b, u, clear):
        sp.add_argument("--home", default=None, help=f"overrides ${HOME_ENV} (default ./data)")
        sp.add_argument("--source-root", default=None, help=f"overrides ${SOURCE_ENV}")
    for sp in (v, b, u):
        sp.add_argument("--source-version", action="append", default=None, metavar="DATASET=RELEASE",
                        help=f"read a PhysioNet release other than the paper's, e.g. mimiciv=3.1 or "
                             f"mimic-cxr-jpg=2.1.0 (repeatable; overrides ${VERSIONS_ENV})")
    return p


def main(argv: list[str] | None = None) -> int:
    # Dagster flags beta, preview and superseded APIs on every load or use (its own Pipes reader calls a preview
    # function on every VQA step); users of the command cannot act on these.
    warnings.filterwarnings("ignore", message=r".*(is currently in (beta|preview)|is in beta|superseded).*")
    args = parser().parse_args(argv)
    return args.func(args)


def console() -> None:
    """The ``ehrxqa`` script: ``main``, then exit at once. A step interrupted by SIGTERM or Ctrl-C can leave a
    worker thread in a request that ends only with its own timeout (the LLM fan-out); the interpreter would
    wait for it at exit, so the process exits without joining such threads once the summary is printed (the
    next build cleans up as after a kill)."""
    code = main()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    console()
