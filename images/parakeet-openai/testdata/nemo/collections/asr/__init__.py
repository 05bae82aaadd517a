# A STAND-IN for NeMo's ASR collection (server_test.go): no GPU, model or PyPI here. It has the
# shape server.py uses (ASRModel.from_pretrained, transcribe with timestamps) and answers with
# the file's name and size.
import os
import time


class _Hypothesis:
    def __init__(self, text, segments):
        self.text = text
        self.timestamp = {"segment": segments}


class _Model:
    def transcribe(self, paths, timestamps=False):
        out = []
        for p in paths:
            n = os.path.getsize(p)
            segs = [{"start": 0.0, "end": 1.25, "segment": "stand-in heard"},
                    {"start": 1.25, "end": 2.5, "segment": f"{n} bytes"}]
            out.append(_Hypothesis(f"stand-in heard {n} bytes", segs))
        return out


class models:
    class ASRModel:
        @staticmethod
        def from_pretrained(model_name):
            time.sleep(float(os.environ.get("STANDIN_LOAD_SECONDS", "1")))
            return _Model()
