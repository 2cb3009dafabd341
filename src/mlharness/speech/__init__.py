"""Whisper's building blocks (speech to text, issue 47), used by ``tasks/speech_to_text.py`` and
``artefacts``: the official manifest (``manifest``), the 16 kHz audio as the reference loads it
(``audio``), the character labels of the LoadGen response (``labels``), the word error rate of
``accuracy_eval.py`` (``wer``) and the LibriSpeech repacking of the reference's dataset scripts
(``repack``). Each follows one official file under ``speech2text/``, named in its docstring.
"""
