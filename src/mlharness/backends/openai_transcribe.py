"""The request of an OpenAI-compatible ``/v1/audio/transcriptions`` (vLLM serves Whisper this
way): a multipart form that :meth:`OpenAIStreamClient.transcribe
<mlharness.backends.openai_stream.OpenAIStreamClient.transcribe>` sends and streams within the
client's bounds (stall deadline, event and header sizes, one line naming the endpoint).

The form holds the clip's file as it is on disk (the server decodes it as the reference's QSL
does, ``librosa.load(sr=16000)``), the served model, ``language=en`` (vLLM then builds the
reference's decoder prompt ``<|startoftranscript|><|en|><|transcribe|><|notimestamps|>``),
``temperature=0`` (greedy), ``max_completion_tokens`` and ``stream=true`` with
``stream_include_usage=true``. The answer is server-sent events: ``choices[0].delta.content``
pieces of text (the first one is the first token), then a chunk whose ``usage`` gives
``completion_tokens``, LoadGen's ``n_tokens`` (vLLM counts every generated id, the end-of-text
one included, as the reference counts ``token_ids``).
"""

from __future__ import annotations

import uuid

TRANSCRIPTIONS = "/v1/audio/transcriptions"


def multipart(fields: dict[str, str], audio: bytes, filename: str = "clip.wav",
              content_type: str = "audio/wav") -> tuple[bytes, str]:
    """The ``multipart/form-data`` body of ``fields`` and the ``file`` part, and its
    Content-Type (with the boundary)."""
    boundary = f"mlharness-{uuid.uuid4().hex}"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'
             .encode() for key, value in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                 f'filename="{filename}"\r\nContent-Type: {content_type}\r\n\r\n'.encode()
                 + audio + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"
