"""Storage: the ``Store`` / ``AdminStore`` protocols (``base``, ``admin``) and the drivers
(``sqlite``). A regular package (not a namespace one) so the layer contracts in
pyproject.toml (``[tool.importlinter]``) can see it."""
