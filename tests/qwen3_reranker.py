"""A Qwen3-Reranker directory for tests, and the model card's reference scoring on it.

`write_qwen3_reranker` saves a random-weight `transformers.Qwen3ForCausalLM` of small real
shapes beside a real byte-level BPE tokenizer.json trained here with Qwen's pre-tokenizer (its
split regex, then byte-level), the chat tokens `<|im_start|>`/`<|im_end|>` and the added
`<think>`/`</think>`, and whole-word tokens "yes" and "no": a directory as Qwen3-Reranker ships
(Qwen's own tokenizer is 150k tokens and not available offline). `reference_pairs` and
`reference_scores` follow the model card's transformers example: the prompt below
(written out here, not imported, so a wrong constant in hedgerow fails the tests), prefix and
suffix tokenized apart from the pair text, the pair text cut from its end to fit, and
softmax over the full LM head's "no" and "yes" logits at the last token.
"""

from pathlib import Path

PREFIX = ('<|im_start|>system\nJudge whether the Document meets the requirements based on the '
          'Query and the Instruct provided. Note that the answer can only be "yes" or '
          '"no".<|im_end|>\n<|im_start|>user\n')
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
# Qwen2/Qwen3's pre-tokenizer split (tokenizer.json of the Qwen3 models).
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
              r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CORPUS = [
    PREFIX + SUFFIX,
    "<Instruct>: " + INSTRUCTION + "\n<Query>: which shrubs make a good hedge?\n<Document>: ",
    "Hawthorn and blackthorn hedges give birds food and shelter in winter.",
    "A stone wall runs beside the lane, and the verges are mown in May.",
    "Holly and ivy berries feed thrushes; wrens and robins nest in the hedgerow.",
    "yes\nno\nyes\nno\nYes, no. Is it relevant? yes or no: no, yes.",
] * 20


def write_tokenizer(path: Path) -> None:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700, show_progress=False,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.add_tokens([AddedToken("<think>", normalized=False),
                          AddedToken("</think>", normalized=False)])
    assert tokenizer.token_to_id("yes") is not None and tokenizer.token_to_id("no") is not None
    tokenizer.save(str(path))


def write_qwen3_reranker(directory: Path, seed: int = 0, tied: bool = True) -> Path:
    """The directory (config.json `architectures: ["Qwen3ForCausalLM"]`, model.safetensors,
    tokenizer.json). `tied`: the LM head is the embedding matrix (tie_word_embeddings, as
    Qwen3-Reranker-0.6B), so the file holds no lm_head.weight; else a head of its own."""
    import torch
    import transformers
    from tokenizers import Tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    write_tokenizer(directory / "tokenizer.json")
    vocab = Tokenizer.from_file(str(directory / "tokenizer.json")).get_vocab_size()
    torch.manual_seed(seed)
    config = transformers.Qwen3Config(
        vocab_size=vocab, hidden_size=96, num_hidden_layers=3, num_attention_heads=6,
        num_key_value_heads=2, head_dim=16, intermediate_size=136, max_position_embeddings=512,
        initializer_range=0.2, rms_norm_eps=1e-6, tie_word_embeddings=tied)
    model = transformers.Qwen3ForCausalLM(config).eval()
    model.save_pretrained(directory)
    return directory


def reference_pairs(directory: Path, query: str, documents: list[str], max_tokens: int
                    ) -> list[list[int]]:
    """Each pair's token ids as the model card's example builds them."""
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(directory / "tokenizer.json"))
    prefix = tokenizer.encode(PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(SUFFIX, add_special_tokens=False)
    texts = [f"<Instruct>: {INSTRUCTION}\n<Query>: {query}\n<Document>: {document}"
             for document in documents]
    bodies = tokenizer(texts, padding=False, truncation="longest_first",
                       return_attention_mask=False,
                       max_length=max_tokens - len(prefix) - len(suffix))["input_ids"]
    return [prefix + body + suffix for body in bodies]


def reference_scores(directory: Path, pairs: list[list[int]]
                     ) -> tuple[list[float], list[float]]:
    """(P("yes"), logit("yes") - logit("no")) of each pair: softmax over the full LM head's
    logits of "no" and "yes" at the last token, with `transformers` in float32, pair by pair."""
    import torch
    import transformers

    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(directory / "tokenizer.json"))
    no, yes = tokenizer.convert_tokens_to_ids("no"), tokenizer.convert_tokens_to_ids("yes")
    model = transformers.Qwen3ForCausalLM.from_pretrained(directory,
                                                          torch_dtype=torch.float32).eval()
    probabilities, log_odds = [], []
    with torch.inference_mode():
        for ids in pairs:
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            two = torch.stack([logits[no], logits[yes]])
            probabilities.append(float(torch.softmax(two, 0)[1]))
            log_odds.append(float(two[1] - two[0]))
    return probabilities, log_odds


def write_sequence_classification(source: Path, directory: Path) -> Path:
    """`source`'s reranker converted to Qwen3ForSequenceClassification as vLLM's and
    sentence-transformers' "seq-cls" checkpoints are: the same decoder, and one label whose
    `score.weight` row is lm_head[yes] - lm_head[no] (so its logit is the log-odds)."""
    import shutil

    import torch
    import transformers

    causal = transformers.Qwen3ForCausalLM.from_pretrained(source, torch_dtype=torch.float32)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(source / "tokenizer.json"))
    no, yes = tokenizer.convert_tokens_to_ids("no"), tokenizer.convert_tokens_to_ids("yes")
    config = transformers.Qwen3Config.from_pretrained(source, num_labels=1,
                                                      architectures=None)
    classifier = transformers.Qwen3ForSequenceClassification(config).eval()
    classifier.model.load_state_dict(causal.model.state_dict())
    with torch.no_grad():
        head = causal.lm_head.weight
        classifier.score.weight.copy_((head[yes] - head[no])[None, :])
    classifier.save_pretrained(directory)
    shutil.copy(source / "tokenizer.json", directory / "tokenizer.json")
    return directory
