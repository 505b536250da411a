"""The tooling shared by the pypsp and pyeesp command lines: CLI helpers, the diagnose framework, vectors.

Nothing in the runtime library (pecore, pypsp, pyeesp outside their ``tools`` subpackages) imports it; it uses
only the runtime's public API, never the cffi binding (import-linter contracts in pyproject.toml).
"""
