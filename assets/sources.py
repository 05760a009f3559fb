"""Observable source assets: one per PhysioNet file (the three semantics files as one), and the reviewers'
decisions file of the paraphrases.

Their data version is the file's content hash, so changing one file makes only its downstream stale.
"""


import dagster as dg

from assets.automation import OBSERVE_SOURCES
from ehrxqa_pipeline import names
from ehrxqa_pipeline.config import Environment
from ehrxqa_pipeline.hashing import FileChangedError, HashCache, combine, stat_key, unchanged_since
from ehrxqa_pipeline.sources.errors import SourceError
from ehrxqa_pipeline.sources.files import origin
from ehrxqa_pipeline.sources.schema import SEMANTICS_FILES, TABLES, release_path
from ehrxqa_pipeline.sources.semantics import semantics_paths

SOURCE_KEYS = {name: dg.AssetKey([names.SOURCES, name]) for name in (*TABLES, names.SEMANTICS)}
REVIEW_SOURCE_KEY = dg.AssetKey([names.SOURCES, names.PARAPHRASE_REVIEW])
NO_FILE = "absent"  # the data version of a review file that does not exist (no decisions: allowed)
# under EHRXQA_HOME/cache; ingestion hashes through the same cache. v2: entries keyed by size, mtime, ctime, inode
# and device (a new name, so an older checkout sharing the home never misreads them as its [size, mtime, digest])
HASH_CACHE = "source_hashes.v2.json"
# Materialization metadata of the assets that read a source file: the source's data version as read (the same
# form as this observation's) and the file; release/manifest records these, not a re-hash made later.
SOURCE_VERSION_FIELD, SOURCE_FILE_FIELD = "source_data_version", "source_file"


def version_as_read(cache_dir, paths):
    """For an asset about to read ``paths``: (their data version, in the form the observation reports, hashed
    now, before the read; a function to call once the read is over, which raises ``FileChangedError`` naming a
    file that changed since: size, mtime, ctime or inode)."""
    before = [stat_key(p.stat()) for p in paths]
    cache = HashCache(cache_dir / HASH_CACHE)
    version = combine(*(cache.digest(p) for p in paths))

    def unchanged() -> None:
        for path, st in zip(paths, before):
            unchanged_since(path, st)

    return version, unchanged


def _spec(name: str) -> dg.AssetSpec:
    if name == names.SEMANTICS:
        desc = ("Chest ImaGenome semantics files (objects, attribute relations, label_to_UMLS_mapping.json). "
                "Grain: one observation of the three files (data version = their combined content hash). "
                "Source: SOURCE_ROOT/" + ", SOURCE_ROOT/".join(release_path("chest-imagenome", p)
                                                               for p in SEMANTICS_FILES) + ".")
    else:
        t = TABLES[name]
        desc = (f"{t.description.capitalize()}. Grain: one observation of the file (data version = its content "
                f"hash). Source: SOURCE_ROOT/{t.release_path}[.gz].")
    return dg.AssetSpec(SOURCE_KEYS[name], group_name=names.SOURCES, description=desc,
                        automation_condition=OBSERVE_SOURCES, kinds={"csv"}, owners=["team:ehrxqa"])


@dg.multi_observable_source_asset(specs=[_spec(n) for n in SOURCE_KEYS], can_subset=True,
                                  name="observe_sources", required_resource_keys={"pipeline_config"})
def observe_sources(context: dg.AssetExecutionContext):
    """Hash each selected source file (cached by size, mtime, ctime and inode) and report it as the data version."""
    settings = context.resources.pipeline_config.settings()
    hashes = HashCache(settings.cache_dir / HASH_CACHE)
    layout = settings.layout()
    for key in context.selected_asset_keys:
        name = key.path[-1]
        try:
            paths = list(semantics_paths(layout)) if name == names.SEMANTICS else [origin(layout, name)]
            missing = [p for p in paths if not p.exists()]
            if missing:
                raise SourceError(file=layout.relative(missing[0]), problem="file is missing",
                                  fix="download it from PhysioNet into the same relative path")
            digest = combine(*(hashes.digest(p) for p in paths))
        except SourceError as e:
            raise dg.Failure(description=str(e)) from None
        except FileChangedError as e:
            raise dg.Failure(description=f"{name}: {e}") from None
        yield dg.ObserveResult(asset_key=key, data_version=dg.DataVersion(digest), metadata={
            "path": dg.MetadataValue.path(str(paths[0])), "bytes": sum(p.stat().st_size for p in paths)})


@dg.multi_observable_source_asset(specs=[dg.AssetSpec(
    REVIEW_SOURCE_KEY, group_name=names.SOURCES, automation_condition=OBSERVE_SOURCES, kinds={"csv"},
    owners=["team:ehrxqa"],
    description="The reviewers' decisions on paraphrase candidates. Grain: one observation of the file (data "
                "version = its content hash; 'absent' without a file), so that an edit re-runs the paraphrase "
                "review, the pools and the release. Source: EHRXQA_REVIEWED_PARAPHRASES, default "
                "paraphrases/reviewed.csv.")],
    name="observe_paraphrase_review", required_resource_keys={"pipeline_config"})
def observe_paraphrase_review(context: dg.AssetExecutionContext):
    path = Environment.read().review_file()
    version = review_file_version(path, context.resources.pipeline_config.settings().cache_dir)
    yield dg.ObserveResult(asset_key=REVIEW_SOURCE_KEY, data_version=dg.DataVersion(version), metadata={
        "path": dg.MetadataValue.path(str(path)), "bytes": path.stat().st_size if path.is_file() else 0})


def review_file_version(path, cache_dir) -> str:
    """The content hash of the review file (through the source hash cache), ``NO_FILE`` when there is none."""
    return HashCache(cache_dir / HASH_CACHE).digest(path) if path.is_file() else NO_FILE
