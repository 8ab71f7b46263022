"""deploy: a trained policy -> a verified ONNX model bundle -> onnxruntime on the edge computer.

Edge modules (numpy + onnxruntime only): `deploy.manifest`, `deploy.bundle`, `deploy.runtime`,
`deploy.hot_reload`, `deploy.doctor`, `deploy.arm_probe`. Training-side modules (torch, onnx):
`deploy.export`, `deploy.quantize`, `deploy.reference_policies`. `deploy.arm` runs the aarch64 check.
Nothing is imported here, so ``import deploy`` stays free of torch.
"""
