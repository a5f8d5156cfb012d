"""The real control plane for the e2e tier and bench-k8s: building the components, PKI, a thin REST
client, the processes, and a launcher for trying it by hand."""
