"""Question answering: BERT on SQuAD v1.1 (MLPerf bert-99 / bert-99.9)."""

from mlharness.tasks.question_answering.task import BertSquadTask, create_bert

__all__ = ["BertSquadTask", "create_bert"]
