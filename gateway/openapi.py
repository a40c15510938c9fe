"""What /openapi.json says about the gateway beyond its routes."""

VERSION = "0.1.0"
DESCRIPTION = "Text embeddings and reranking, in the OpenAI, Cohere and TEI APIs."
