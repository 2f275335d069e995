"""python -m gpuml: lists the Vulkan devices gpuml sees and where its default choice runs."""

import gpuml

for d in gpuml.devices():
    print(f"{d['index']}: {d['name']} ({d['type']}, float64 {'yes' if d['float64'] else 'no'})")
print(f"default: {gpuml.backend_name()}")
