"""Reading raw inputs: files and their compression (``sources``, ``inflate``), records as documents
(``readers``, ``documents``)."""
