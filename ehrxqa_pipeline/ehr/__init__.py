"""The EHRXQA integrated databases (silver: training/validation questions; gold: test), as library code.

``build.build_database`` writes ``ehr_<which>`` (17 MIMIC-IV-derived tables + TB_CXR) into the warehouse,
``build.build_answer_sheet`` then ``ehr_<which>_answers.tb_cxr_plus`` (the answer sheet); ``export`` delivers
them as DuckDB and SQLite files (``mimic_iv_cxr.db``; ``tb_cxr_plus.db`` apart); ``checks`` verifies keys,
time bounds, current patients, ages, images and the answer sheet. The declared schema lives in ``ddl``.
"""
