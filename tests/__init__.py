"""The test suite, one package per room of src/tokenport (so same-named modules cannot clash)."""
