"""host:port text for listeners, logs and URLs, with IPv6 hosts in brackets ("[::1]:50051")."""


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
