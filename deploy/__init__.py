"""deploy: a trained policy -> a verified ONNX model bundle -> onnxruntime on the edge computer.

Edge modules (numpy + onnxruntime only): `tinker_deploy.manifest`, `tinker_deploy.bundle`, `tinker_deploy.runtime`,
`tinker_deploy.hot_reload`, `tinker_deploy.doctor`, `tinker_deploy.arm_probe`. Training-side modules (torch, onnx):
`tinker_deploy.export`, `tinker_deploy.quantize`, `tinker_deploy.reference_policies`. `tinker_deploy.arm` runs the aarch64 check.
Nothing is imported here, so ``import tinker_deploy`` stays free of torch.
"""
