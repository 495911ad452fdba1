"""Pooled outputs of the same weights in a context of their own: embeddings and a reranker's scores."""
