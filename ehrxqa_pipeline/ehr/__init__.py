"""The EHRXQA integrated databases (silver: training/validation questions; gold: test), as library code.

``build.build_database`` writes ``ehr_<which>`` (17 MIMIC-IV-derived tables + TB_CXR) and
``ehr_<which>_answers.tb_cxr_plus`` (the answer sheet) into the warehouse; ``export.export_database``
delivers them as DuckDB and SQLite (``mimic_iv_cxr.db``) files; ``checks`` verifies keys, time bounds,
current patients, ages, images and the answer sheet. The declared schema lives in ``ddl``.
"""
