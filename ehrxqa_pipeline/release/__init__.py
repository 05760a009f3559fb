"""The release folder's own files (EHRXQA_HOME/release), built after the datasets and databases:

* ``statistics/tables.{md,json}`` (``tables``): paper Tables B4-B6 and C9 gathered with cohort funnels,
  rows set aside per reason, per-template counts and answer distributions;
* ``plots/*.png`` (``plots``): answer distributions, per-template counts, cohort funnels;
* ``datasheet.md`` (``datasheet``): the paper's appendix A datasheet answered from the build;
* ``LICENSE.txt`` (``license_note``): the PhysioNet license and data use agreement the data files inherit;
* ``README.md`` (``readme``): the folder's guide: files, loading snippets, empty answers, study ids;
* ``hf/{ehrxqa,mimic-cxr-vqa}/`` (``hf``): the question files as parquet per split with a Hugging Face dataset
  card, so that ``datasets.load_dataset("<release>/hf/ehrxqa")`` loads them offline (local use only: the data
  use agreement forbids posting them to any hub); objects whose keys vary by template as JSON text;
* ``croissant.json`` (``croissant``): the folder in Croissant 1.1 (JSON-LD): every data file with its SHA-256,
  typed record sets per dataset and split, the splits and the RAI fields from the datasheet; validated offline by
  mlcroissant in the blocking check ``release/croissant:valid``;
* ``identity``: the published PhysioNet releases the datasets rebuild and this build's release version,
  stated once for the manifest, the datasheet and the README;
* ``manifest.json`` (``manifest``): every release file with its SHA-256, source versions, code version,
  seed and configuration; two builds of the same inputs give identical manifests; and ``SHA256SUMS.txt``
  beside it, every file in ``sha256sum -c`` format;
* ``CHANGELOG.md`` (``changelog``, written by the manifest's asset): one section per release version built in
  this home, from snapshots kept in EHRXQA_HOME/release_history; and what changed between any two release
  folders (``ehrxqa changelog OLD NEW``).

No wall-clock time and no absolute path is written into any of them. Files are written atomically through
``ehrxqa_pipeline.atomic``, like every other output.
"""
