"""The Kubernetes operator for EmbeddingServices (see DESIGN.md and docs/operator.md). No torch,
no gRPC, no engine, server or gateway code: the settings it exposes come from the base package.

main.py          `hedgerow operator`          registration.py  which event calls which handler
handlers.py      the order of work            spec.py          a defaulted spec
crd.py           the CRD: schema, CEL rules   schema.py        schema nodes and rules
knobs.py         settings the CRD exposes     names.py         fixed names and labels
manifests.py     every child of one resource  build_server.py  server manifests
build_gateway.py gateway manifests            build_scaling.py PDBs and the HPA
build_common.py  pieces both pods share       status.py        conditions and counts
warmup.py        /warmup and the readiness gate
kube.py          API calls on the `kubernetes` package
"""
