"""NeuralSQL: SQL plus FUNC_VQA(question, study_id), parsed, validated and executed on the EHRXQA SQLite
database with a pluggable VQA module (oracle over the answer sheet, constant "yes" baseline, models).

Pure library code (no Dagster). Entry points: ``NeuralSqlExecutor(db, module).execute(query)``,
``parse_neuralsql``, ``same_answer`` for order-insensitive answer comparison.
"""

from ehrxqa_pipeline.questions.neuralsql.errors import (NeuralSqlError, NeuralSqlExecutionError,
                                                        NeuralSqlSyntaxError, NeuralSqlValidationError,
                                                        OracleQuestionError, VqaModuleError)
from ehrxqa_pipeline.questions.neuralsql.executor import (ExecutionResult, NeuralSqlExecutor, normalise_rows,
                                                          same_answer)
from ehrxqa_pipeline.questions.neuralsql.oracle import OracleModule, QuestionInverter, load_answer_sheet
from ehrxqa_pipeline.questions.neuralsql.parser import (CURRENT_TIME, ParsedQuery, VqaCall, parse_neuralsql,
                                                        postprocess_query)
from ehrxqa_pipeline.questions.neuralsql.vqa_modules import (Answer, ImageRef, VqaModule, YesModule, image_path,
                                                             normalise_answer, resolve_images)

__all__ = [
    "CURRENT_TIME", "Answer", "ExecutionResult", "ImageRef", "NeuralSqlError", "NeuralSqlExecutionError",
    "NeuralSqlExecutor", "NeuralSqlSyntaxError", "NeuralSqlValidationError", "OracleModule", "OracleQuestionError",
    "ParsedQuery", "QuestionInverter", "VqaCall", "VqaModule", "VqaModuleError", "YesModule", "image_path",
    "load_answer_sheet", "normalise_answer", "normalise_rows", "parse_neuralsql", "postprocess_query",
    "resolve_images", "same_answer",
]
