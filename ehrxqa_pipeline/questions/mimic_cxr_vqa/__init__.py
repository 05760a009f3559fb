"""MIMIC-CXR-VQA question templates, their programs and arguments, sampling, records and statistics."""
