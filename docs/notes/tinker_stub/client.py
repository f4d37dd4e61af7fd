import os
os.environ["TINKER_BASE_URL"] = "http://127.0.0.1:8765"
os.environ["TINKER_API_KEY"] = "tml-local"
os.environ["TINKER_TELEMETRY"] = "0"
import tinker
from tinker import types
sc = tinker.ServiceClient()
tc = sc.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=32).result()
print("info", tc.get_info().model_id, tc.get_info().lora_rank)
d = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]), loss_fn_inputs={"target_tokens": [2, 3, 4], "weights": [0.0, 1.0, 1.0]})
f = tc.forward_backward([d, d], "cross_entropy"); o = tc.optim_step(types.AdamParams(learning_rate=1e-4))
r = f.result(); print("fwdbwd", r.metrics, [x["logprobs"].shape for x in r.loss_fn_outputs], o.result())
print("save", tc.save_state("step-1").result().path)
print("sampler path", tc.save_weights_for_sampler("s1").result().path)
samp = tc.save_weights_and_get_sampling_client().result()
res = samp.sample(types.ModelInput.from_ints([1, 2, 3]), 2, types.SamplingParams(max_tokens=2)).result()
print("sample", [(s.tokens, s.logprobs, s.stop_reason, s.sequence_id[:8]) for s in res.sequences])
print("logprobs", samp.compute_logprobs(types.ModelInput.from_ints([1, 2, 3])).result())
samp2 = sc.create_sampling_client(model_path="tinker://sess1:train:0/sampler_weights/s1").result()
print("samp2 base", samp2.get_base_model())
d2 = types.Datum(model_input=types.ModelInput.from_ints([1, 2, 3]), loss_fn_inputs={"target_tokens": [2, 3, 4], "logprobs": [-1.0, -1.0, -1.0], "advantages": [0.0, 1.0, 1.0]})
print("IS", tc.forward_backward([d2], "importance_sampling").result().metrics)
try: tc.forward_backward([d2], "ppo", {"clip_low_threshold": 0.8}).result()
except Exception as e: print("PPO ERR", type(e).__name__, "|", e)
try: tc.save_weights_external("x").result()
except Exception as e: print("EXT ERR", type(e).__name__, "|", e)
sc.close("success").result()
