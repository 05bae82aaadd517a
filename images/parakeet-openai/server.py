"""An OpenAI-compatible transcription server for NVIDIA's Parakeet TDT 0.6B v3 (NeMo).

POST /v1/audio/transcriptions   multipart: file, model, response_format
                                (json, text, verbose_json, srt, vtt), language (ignored:
                                the model detects it), as OpenAI's API takes them
GET  /v1/models                 the one model
GET  /health                    200 once the model is loaded, 503 before

Standard library only, beside NeMo: one request at a time reaches the GPU (a lock), the
others wait. Audio in another format than WAV/FLAC is converted with ffmpeg to 16 kHz mono.
"""

import email.parser
import email.policy
import json
import os
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = os.environ.get("PARAKEET_MODEL", "nvidia/parakeet-tdt-0.6b-v3")
PORT = int(os.environ.get("PARAKEET_PORT", "8000"))
MAX_UPLOAD = 100 << 20

state = {"model": None, "error": None}
gpu = threading.Lock()


def load():
    try:
        import nemo.collections.asr as nemo_asr  # noqa: imported late: /health answers while it loads

        print(f"INFO loading {MODEL}", flush=True)
        state["model"] = nemo_asr.models.ASRModel.from_pretrained(model_name=MODEL)
        print(f"INFO {MODEL} loaded: serving on 0.0.0.0:{PORT}", flush=True)
    except Exception as e:  # the agent reports the server's last lines
        state["error"] = f"{type(e).__name__}: {e}"
        print(f"ERROR loading {MODEL}: {state['error']}", flush=True)
        os._exit(1)


def timestamp(seconds, sep):
    ms = int(round(seconds * 1000))
    h, ms = divmod(ms, 3600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def transcribe(path):
    with gpu:
        out = state["model"].transcribe([path], timestamps=True)
    hyp = out[0]
    segments = []
    for i, seg in enumerate((getattr(hyp, "timestamp", None) or {}).get("segment", [])):
        segments.append({"id": i, "start": float(seg["start"]), "end": float(seg["end"]), "text": seg["segment"]})
    return hyp.text, segments


def to_wav(src, dst):
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", src, "-ac", "1", "-ar", "16000", dst], check=True)


def render(fmt, text, segments):
    if fmt == "text":
        return "text/plain; charset=utf-8", text + "\n"
    if fmt == "verbose_json":
        duration = segments[-1]["end"] if segments else 0.0
        body = {"task": "transcribe", "language": "auto", "duration": duration, "text": text, "segments": segments}
        return "application/json", json.dumps(body)
    if fmt in ("srt", "vtt"):
        sep = "," if fmt == "srt" else "."
        cues = segments or [{"start": 0.0, "end": 0.0, "text": text}]
        lines = ["WEBVTT", ""] if fmt == "vtt" else []
        for i, c in enumerate(cues, 1):
            if fmt == "srt":
                lines.append(str(i))
            lines += [f"{timestamp(c['start'], sep)} --> {timestamp(c['end'], sep)}", c["text"].strip(), ""]
        return ("application/x-subrip" if fmt == "srt" else "text/vtt") + "; charset=utf-8", "\n".join(lines)
    return "application/json", json.dumps({"text": text})


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, code, ctype, body):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, code, message):
        self.reply(code, "application/json", json.dumps({"error": {"message": message, "type": "invalid_request_error"}}))

    def do_GET(self):
        if self.path == "/health":
            if state["model"] is None:
                return self.reply(503, "text/plain", "loading\n")
            return self.reply(200, "text/plain", "ok\n")
        if self.path == "/v1/models":
            body = {"object": "list", "data": [{"id": MODEL, "object": "model", "created": int(time.time()), "owned_by": "nvidia"}]}
            return self.reply(200, "application/json", json.dumps(body))
        self.error(404, f"no route {self.path}")

    def do_POST(self):
        if self.path != "/v1/audio/transcriptions":
            return self.error(404, f"no route {self.path}")
        if state["model"] is None:
            return self.error(503, "the model is still loading")
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_UPLOAD:
            return self.error(400, f"a multipart body of at most {MAX_UPLOAD} bytes is required")
        raw = self.rfile.read(length)
        head = f"Content-Type: {self.headers.get('Content-Type', '')}\r\n\r\n".encode()
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
        if not msg.is_multipart():
            return self.error(400, "the body must be multipart/form-data")
        fields, audio, name = {}, None, "audio"
        for part in msg.iter_parts():
            field = part.get_param("name", header="content-disposition")
            if field == "file":
                audio, name = part.get_payload(decode=True), part.get_filename() or "audio"
            elif field:
                fields[field] = part.get_content().strip()
        if not audio:
            return self.error(400, "no file field")
        fmt = fields.get("response_format", "json")
        if fmt not in ("json", "text", "verbose_json", "srt", "vtt"):
            return self.error(400, f"response_format {fmt!r}: json, text, verbose_json, srt or vtt")
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, os.path.basename(name))
            with open(src, "wb") as f:
                f.write(audio)
            path = src
            if not src.lower().endswith((".wav", ".flac")):
                path = os.path.join(d, "audio.wav")
                try:
                    to_wav(src, path)
                except subprocess.CalledProcessError:
                    return self.error(400, "the file is not audio ffmpeg can read")
            text, segments = transcribe(path)
        ctype, body = render(fmt, text, segments)
        self.reply(200, ctype, body)

    def log_message(self, fmt, *args):
        print("INFO " + (fmt % args), flush=True)


if __name__ == "__main__":
    threading.Thread(target=load, daemon=True).start()
    ThreadingHTTPServer(("0.0.0.0", PORT), Handler).serve_forever()
