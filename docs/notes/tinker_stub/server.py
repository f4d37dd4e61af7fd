import shim  # noqa
import json, re, uuid, threading, sys
import numpy as np
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
from tinker.proto import tinker_public_pb2 as pb

LOG = []
results = {}  # request_id -> (content_type, bytes)

def put_json(obj):
    rid = str(uuid.uuid4()); results[rid] = ("application/json", json.dumps(obj).encode()); return rid
def put_proto(msg):
    rid = str(uuid.uuid4()); results[rid] = ("application/x-protobuf", msg.SerializeToString()); return rid

def fwdbwd(body, headers):
    req = pb.ForwardBackwardRequest(); req.ParseFromString(body)
    LOG.append(("fwdbwd", req.loss_fn, req.seq_id, req.forward_only, dict(req.loss_fn_config), [sorted(d.loss_fn_inputs.keys()) for d in req.data]))
    if req.loss_fn not in ("cross_entropy", "importance_sampling"):
        return {"request_id": put_json({"error": f"loss_fn {req.loss_fn!r} is not supported by this server", "category": "user"}), "model_id": req.model_id}
    out = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    rec = out.loss_fn_outputs.add(); rec.num_datums = len(req.data)
    per = []
    for d in req.data:
        tt = d.loss_fn_inputs["target_tokens"]
        n = len(np.frombuffer(tt.dense, dtype=np.int64))
        per.append(np.full(n, -1.5, dtype=np.float32))
    bt = rec.fields["logprobs"]; bt.dtype = pb.DTYPE_FLOAT32
    bt.data = b"".join(a.tobytes() for a in per)
    bt.offsets = np.cumsum([0] + [a.nbytes for a in per]).astype(np.int64).tobytes()
    out.metrics["loss:sum"] = float(sum(1.5 * len(a) for a in per))
    return {"request_id": put_proto(out), "model_id": req.model_id}

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def send(self, code, ctype, data):
        self.send_response(code); self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def j(self, obj, code=200): self.send(code, "application/json", json.dumps(obj).encode())
    def do_GET(self):
        LOG.append(("GET", self.path))
        m = re.match(r"/api/v1/samplers/(.+)", self.path)
        if m: return self.j({"sampler_id": m.group(1), "base_model": "Qwen/Qwen3-8B", "model_path": None})
        self.j({"detail": "not found"}, 404)
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        p = self.path
        LOG.append(("POST", p, self.headers.get("content-type"), self.headers.get("X-API-Key"), self.headers.get("Accept")))
        if p == "/api/v1/forward_backward": return self.j(fwdbwd(body, self.headers))
        b = json.loads(body or b"{}")
        if p == "/api/v1/client/config": return self.j({"use_pyqwest_transport": False})
        if p == "/api/v1/client/dynamic_config": return self.j({}, 404)
        if p == "/api/v1/create_session": return self.j({"session_id": "sess1"})
        if p == "/api/v1/session_heartbeat": return self.j({"type": "session_heartbeat"})
        if p == "/api/v1/telemetry": return self.j({"status": "accepted"})
        if p == "/api/v1/create_model":
            mid = f"{b['session_id']}:train:{b['model_seq_id']}"
            return self.j({"request_id": put_json({"model_id": mid, "type": "create_model"}), "model_id": mid})
        if p == "/api/v1/get_info":
            return self.j({"model_id": b["model_id"], "model_data": {"model_name": "Qwen/Qwen3-8B"}, "is_lora": True, "lora_rank": 32})
        if p == "/api/v1/optim_step":
            LOG.append(("optim", b)); return self.j({"request_id": put_json({"metrics": {}}), "model_id": b["model_id"]})
        if p == "/api/v1/save_weights":
            return self.j({"request_id": put_json({"path": f"tinker://{b['model_id']}/weights/{b['path']}", "type": "save_weights"})})
        if p == "/api/v1/save_weights_for_sampler":
            if b.get("path"): r = {"path": f"tinker://{b['model_id']}/sampler_weights/{b['path']}"}
            else: r = {"sampling_session_id": f"samp-{b['sampling_session_seq_id']}"}
            return self.j({"request_id": put_json(r)})
        if p == "/api/v1/save_weights_external":
            return self.j({"detail": "save_weights_external is not supported by this server"}, 400)
        if p == "/api/v1/create_sampling_session":
            return self.j({"sampling_session_id": f"samp-{b['sampling_session_seq_id']}"})
        if p == "/api/v1/asample":
            LOG.append(("asample", {k: v for k, v in b.items() if k != "prompt"}))
            resp = pb.SampleResponse()
            for i in range(b["num_samples"]):
                s = resp.sequences.add(); s.stop_reason = pb.STOP_REASON_LENGTH
                s.tokens = np.array([7, 8], dtype=np.int32).tobytes(); s.logprobs = np.array([-0.1, -0.2], dtype=np.float32).tobytes()
            if b.get("prompt_logprobs"):
                n = sum(len(c["tokens"]) for c in b["prompt"]["chunks"])
                resp.prompt_logprobs = np.array([np.nan] + [-1.0] * (n - 1), dtype=np.float32).tobytes()
            return self.j({"request_id": put_proto(resp), "sample_sequence_ids": [f"seq-{uuid.uuid4()}" for _ in range(b["num_samples"])]})
        if p == "/api/v1/retrieve_future":
            ctype, data = results[b["request_id"]]; return self.send(200, ctype, data)
        m = re.match(r"/api/v1/sessions/(.+)/finish", p)
        if m: LOG.append(("finish", b)); return self.j({})
        self.j({"detail": f"{p} not implemented"}, 404)

if __name__ == "__main__":
    srv = ThreadingHTTPServer(("127.0.0.1", 8765), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    import runpy; runpy.run_path(sys.argv[1], run_name="__main__")
    print("---- server log ----")
    for e in LOG: print(e)
    srv.shutdown()
