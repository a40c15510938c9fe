"""Qwen3-Reranker's prompt and answer tokens: the facts the gateway (which formats each pair)
and the engine (which reads the answer's logits) both need.

Qwen3-Reranker is a Qwen3ForCausalLM asked, in a chat prompt, whether a document meets a query
and an instruction; its relevance is the probability of the answer "yes" against "no" at the
prompt's last token: sigmoid(logit("yes") - logit("no")). A pair is the prefix, then
`<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>: {document}`, then the suffix (an
empty thinking block before the answer), as its model card writes it. Torch-free; knows
nothing about tokenizers.
"""

PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the "
          "Query and the Instruct provided. Note that the answer can only be \"yes\" or "
          "\"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
# The answer tokens, (negative, positive): the score is the positive's logit less the negative's.
ANSWER_TOKENS = ("no", "yes")
# The architectures (config.json model_type) whose cross-encoders read this prompt.
PROMPTED_ARCHITECTURES = ("qwen3",)


def query_part(query: str, instruction: str = DEFAULT_INSTRUCTION) -> str:
    """Everything of a pair before the document: the prefix, instruction, query and the
    document's label. It ends at "<Document>:" so the document's text (`document_part`) starts
    a token of its own: the pieces tokenize as the whole text would."""
    return f"{PREFIX}<Instruct>: {instruction}\n<Query>: {query}\n<Document>:"


def document_part(document: str) -> str:
    return " " + document
