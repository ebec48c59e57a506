"""The text side of the goldens (scripts/make_goldens.py): Hugging Face tokenizers' ids and decodes for the real
and built tokenizers, and the chat templates rendered and tokenized by transformers."""
import json
import os
import sys
import unicodedata

UNICODE_CASES = [
    "", " ", "  leading and trailing  ", "tabs\tand\r\nwindows\nlines\n\n\n",
    "Caf\u00e9 vs Cafe\u0301 (NFC)", "na\u00efve r\u00e9sum\u00e9 \u00fcber", "\u4f60\u597d\uff0c\u4e16\u754c\uff01 \u65e5\u672c\u8a9e",
    "emoji \U0001F600\U0001F680 and \u2764\ufe0f", "I'LL SHE'S we're they've", "numbers 1234567 3.14159 1,000,000",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>", "code: def f(x):\n    return x**2  # sq",
    "\u00a0non-breaking\u2003em-space", "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd",
    "quotes \u201cdouble\u201d and \u2018single\u2019", "   ", "a\u0300\u0301\u0302 combining",
    "literal <unk> and a<unk>b, <s>x</s> <|start_story|>Once<|end_story|> <|endoftext|><|im_end|>",
]


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def llama3_style_tokenizer(fixtures, path):
    """A Llama-3-style tokenizer.json (no such file is among the fixtures): byte-level BPE trained by HF
    tokenizers on tiny-shakespeare, Llama-3's split regex, ignore_merges, BOS via TemplateProcessing."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train([os.path.join(fixtures, "text", "tinyshakespeare.txt")], trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    tok.save(path)


def metaspace_style_tokenizer(fixtures, path):
    """A SentencePiece-style tokenizer.json as newer Mistral/Llama-2 conversions write them: BPE with byte fallback
    trained by HF tokenizers on tiny-shakespeare, the Metaspace pre-tokenizer (prepend_scheme "first", split) and
    decoder, <s>/</s> special tokens, BOS via TemplateProcessing."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="\u2581",
                                                                                   prepend_scheme="first")])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=1400, special_tokens=specials, show_progress=False)
    tok.train([os.path.join(fixtures, "text", "tinyshakespeare.txt")], trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.save(path)


# Text around added tokens, where their lstrip/rstrip (Phi-3's chat tokens and </s> take the whitespace after them)
# and the normalizer's Prepend of each piece between them decide the ids.
ADDED_TOKEN_CASES = [
    "one</s> two", "one </s>  two", "<s>start</s>", "a<|end|>\n<|user|>\n  b", "<|assistant|>   \n\nreply<|end|>\n",
    "<|im_start|>user\n hi <|im_end|>\n", "<|endoftext|>", " <|system|>\tsys<|end|>", "x</s>\u00a0\u2003y",
]


def tokenizer_goldens(fixtures, out):
    from tokenizers import Tokenizer

    target = os.path.join(out, "tokenizers")
    os.makedirs(target, exist_ok=True)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    llama3 = os.path.join(target, "llama3-style.tokenizer.json")
    metaspace = os.path.join(target, "metaspace-style.tokenizer.json")
    if os.path.exists(os.path.join(fixtures, "text", "tinyshakespeare.txt")):
        llama3_style_tokenizer(fixtures, llama3)
        metaspace_style_tokenizer(fixtures, metaspace)
    files = {"llama3-style": llama3, "metaspace-style": metaspace,
             "builtin-tiny": os.path.join(root, "configs", "builtin-tiny", "tokenizer.json"),
             "qwen3": os.path.join(fixtures, "tokenizers", "qwen3", "tokenizer.json"),
             "phi-3": os.path.join(fixtures, "tokenizers", "phi-3-mini-4k-instruct", "tokenizer.json"),
             "tinystories-656k": os.path.join(fixtures, "models", "tinystories-656k", "tokenizer.json")}
    texts = list(UNICODE_CASES) + ADDED_TOKEN_CASES
    for name, limit in (("tinyshakespeare.txt", 3000), ("tinystories_sample.txt", 1000)):
        path = os.path.join(fixtures, "text", name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                texts += [line.rstrip("\n") for line in f][:limit]
    for name, path in files.items():
        if not os.path.exists(path):
            print(f"make_goldens: {path} absent, skipping tokenizer {name}", file=sys.stderr)
            continue
        tok = Tokenizer.from_file(path)
        cases = []
        for text in texts:
            ids = tok.encode(text).ids
            plain = tok.encode(text, add_special_tokens=False)
            cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True),
                          "ids_plain": plain.ids, "offsets_plain": plain.offsets,
                          "nfc_changes": unicodedata.normalize("NFC", text) != text})
        with open(os.path.join(target, f"{name.replace('-', '_')}.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer": path, "cases": cases}, f, ensure_ascii=False)
    # The same texts through transformers' AutoTokenizer on the model directories, whose tokenizer class may build
    # another pipeline than tokenizer.json's (LlamaTokenizer does).
    from transformers import AutoTokenizer
    for name, directory in (("qwen3", os.path.join(fixtures, "tokenizers", "qwen3")),
                            ("phi-3", os.path.join(fixtures, "tokenizers", "phi-3-mini-4k-instruct")),
                            ("tinystories-656k", os.path.join(fixtures, "models", "tinystories-656k"))):
        if not os.path.exists(os.path.join(directory, "tokenizer.json")):
            continue
        tok = AutoTokenizer.from_pretrained(directory)
        as_file = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
        cases = []
        for text in texts:
            encoded = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            ids = encoded["input_ids"]
            # Characters the rebuilt BPE (no unk_token) drops, where the file's gives <unk> (not the literal "<unk>"):
            # HF's offsets of the tokens after one are shifted by it, so only the ids and the decode are compared.
            file_encoding = as_file.encode(text, add_special_tokens=False)
            drops = tok.backend_tokenizer.model.unk_token is None and any(
                i == as_file.token_to_id(str(tok.unk_token)) and text[a:b] != tok.unk_token
                for i, (a, b) in zip(file_encoding.ids, file_encoding.offsets))
            cases.append({"text": text, "ids": ids, "offsets": [list(o) for o in encoded["offset_mapping"]],
                          "decoded": tok.decode(ids, skip_special_tokens=True), "drops_characters": drops,
                          "nfc_changes": unicodedata.normalize("NFC", text) != text})
        with open(os.path.join(target, f"{name.replace('-', '_')}.transformers.json"), "w", encoding="utf-8") as f:
            json.dump({"directory": directory, "class": type(tok).__name__, "cases": cases}, f, ensure_ascii=False)


# Chat templates in the style of three model families whose tokenizer files are not among the fixtures (the real
# Qwen3 template is): Llama-3.x (bos, system header, `| trim`, slicing the system message off), Mistral
# (alternation enforced with raise_exception, eos after replies) and Gemma (no system role, `model` turns,
# no whitespace control so trim_blocks/lstrip_blocks matter).
FAMILY_TEMPLATES = {
    "llama3-style": (
        "{{- bos_token }}\n"
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {%- set system_message = messages[0]['content']|trim %}\n"
        "    {%- set messages = messages[1:] %}\n"
        "{%- else %}\n"
        "    {%- set system_message = \"\" %}\n"
        "{%- endif %}\n"
        "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
        "{{- \"Cutting Knowledge Date: December 2023\\n\\n\" }}\n"
        "{{- system_message }}\n"
        "{{- \"<|eot_id|>\" }}\n"
        "{%- for message in messages %}\n"
        "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
        "{%- endif %}\n"),
    "mistral-style": (
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {%- set system_message = messages[0]['content'] %}\n"
        "    {%- set loop_messages = messages[1:] %}\n"
        "{%- else %}\n"
        "    {%- set loop_messages = messages %}\n"
        "{%- endif %}\n\n"
        "{{- bos_token }}\n"
        "{%- for message in loop_messages %}\n"
        "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
        "        {{- raise_exception('After the optional system message, roles must alternate user/assistant') }}\n"
        "    {%- endif %}\n"
        "    {%- if message['role'] == 'user' %}\n"
        "        {%- if loop.first and system_message is defined %}\n"
        "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
        "        {%- else %}\n"
        "            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
        "        {%- endif %}\n"
        "    {%- elif message['role'] == 'assistant' %}\n"
        "        {{- ' ' + message['content'] + eos_token}}\n"
        "    {%- else %}\n"
        "        {{- raise_exception('Only user and assistant roles are supported after the system message') }}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"),
    "gemma-style": (
        "{{ bos_token }}\n"
        "{% if messages[0]['role'] == 'system' %}\n"
        "    {{ raise_exception('System role not supported') }}\n"
        "{% endif %}\n"
        "{% for message in messages %}\n"
        "    {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
        "        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n"
        "    {% endif %}\n"
        "    {% if (message['role'] == 'assistant') %}\n"
        "        {% set role = 'model' %}\n"
        "    {% else %}\n"
        "        {% set role = message['role'] %}\n"
        "    {% endif %}\n"
        "    {{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}\n"
        "{% endfor %}\n"
        "{% if add_generation_prompt %}\n"
        "    {{'<start_of_turn>model\\n'}}\n"
        "{% endif %}\n"),
}

CONVERSATIONS = [
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
     {"role": "assistant", "content": "4"}],
    [{"role": "user", "content": "  padded question \n"}, {"role": "assistant", "content": "\n padded answer  "},
     {"role": "user", "content": "and again?"}, {"role": "assistant", "content": "Again: yes."}],
    [{"role": "system", "content": "You are a pirate.\nSpeak like one."}, {"role": "user", "content": "Hello"},
     {"role": "assistant", "content": "Arr!"}, {"role": "user", "content": "Where is the treasure?"},
     {"role": "assistant", "content": "Under the \"X\", matey {not telling}."}],
    [{"role": "user", "content": "Caf\u00e9 \u4f60\u597d \U0001F600"}, {"role": "assistant", "content": "\u00fcber \u2764\ufe0f"}],
    [{"role": "user", "content": "think first"},
     {"role": "assistant", "content": "<think>\nLet me see.\n</think>\n\nThe answer is 7."}],
    [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "<think>r1</think>a1"},
     {"role": "user", "content": "q2"}, {"role": "assistant", "content": "<think>\nr2\n</think>\n\na2"}],
    [{"role": "user", "content": "Call the tool"}, {"role": "assistant", "content": "Calling."},
     {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "assistant", "content": "It is 21 degrees."}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
    [{"role": "assistant", "content": "I speak first."}, {"role": "user", "content": "ok"}],
    [{"role": "system", "content": "sys"}, {"role": "system", "content": "second system"},
     {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}],
    [{"role": "user", "content": "tabs\tand\r\nwindows"}, {"role": "assistant", "content": "ok\t"}],
]


def chat_template_goldens(fixtures, out):
    """Conversations rendered by transformers' chat-template renderer (the one apply_chat_template uses), with and
    without the generation prompt, or the error it raised: the real Qwen3 template and the family templates."""
    import jinja2
    from transformers.utils.chat_template_utils import render_jinja_template

    templates = {name: (t, "<s>", "</s>") for name, t in FAMILY_TEMPLATES.items()}
    qwen3 = os.path.join(fixtures, "tokenizers", "qwen3", "tokenizer_config.json")
    if os.path.exists(qwen3):
        with open(qwen3, encoding="utf-8") as f:
            templates["qwen3"] = (json.load(f)["chat_template"], None, "<|im_end|>")
    result = {}
    for name, (template, bos, eos) in templates.items():
        cases = []
        for messages in CONVERSATIONS:
            case = {"messages": messages}
            for key, prompt in (("rendered", False), ("rendered_prompt", True)):
                try:
                    rendered, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                                        add_generation_prompt=prompt, bos_token=bos, eos_token=eos)
                    case[key] = rendered[0]
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
            cases.append(case)
        result[name] = {"template": template, "bos_token": bos, "eos_token": eos, "cases": cases}
    with open(os.path.join(out, "chat_templates.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)


# Each family's chat templates among the fixtures on a tokenizer of the family's kind, where its real tokenizer.json is
# not among them: (name, the kind, its special tokens, added tokens that are not special, bos, eos, unk, the
# templates' file-name prefixes). Kinds: byte-level BPE with Llama-3's split (Llama 3, the R1 distills, Mistral's
# Tekken, Phi-4's tiktoken-style), SentencePiece-style BPE with byte fallback whose spaces are replaced by U+2581
# without a prefix (Gemma), and the Metaspace pre-tokenizer with a prefix (Mistral's v3 SentencePiece).
FAMILY_CHAT_TOKENIZERS = [
    ("llama3", "byte-level", ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                              "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"], [],
     "<|begin_of_text|>", "<|eot_id|>", None, ["meta-llama-Llama-3."]),
    ("deepseek-r1", "byte-level", ["<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
                                   "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>"] + [
        f"<\uff5ctool\u2581{t}\uff5c>" for t in ("calls\u2581begin", "calls\u2581end", "call\u2581begin", "call\u2581end",
                                             "outputs\u2581begin", "outputs\u2581end", "output\u2581begin",
                                             "output\u2581end", "sep")], ["<think>", "</think>"],
     "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>", None,
     ["deepseek-ai-DeepSeek-R1-Distill-"]),
    ("gemma", "sentencepiece", ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>",
                                "<start_of_image>"], [], "<bos>", "<eos>", "<unk>", ["google-gemma-"]),
    ("mistral-spm", "metaspace", ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                                  "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"], [],
     "<s>", "</s>", "<unk>", ["mistralai-mistral-common-v3_spm"]),
    ("mistral-tekken", "byte-level", ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
                                      "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]",
                                      "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]", "[ARGS]", "[CALL_ID]"], [],
     "<s>", "</s>", "<unk>", ["mistralai-Mistral-Nemo", "mistralai-Mistral-Small", "mistralai-mistral-common-v7",
                              "mistralai-mistral-common-v11"]),
    ("phi-4", "byte-level", ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_sep|>"], [],
     "<|endoftext|>", "<|im_end|>", None, ["microsoft-phi-4"]),
    ("phi-4-mini", "byte-level", ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>", "<|system|>", "<|tool|>",
                                  "<|/tool|>"], [], "<|endoftext|>", "<|endoftext|>", "<|endoftext|>",
     ["microsoft-Phi-4-mini"]),
]


def family_chat_tokenizer(fixtures, directory, kind, specials, added, bos, eos, unk):
    """A tokenizer of `kind` trained by HF tokenizers on tiny-shakespeare with the family's special tokens, saved with
    a tokenizer_config.json naming its bos/eos/unk, as a model directory has them."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    if kind == "byte-level":
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    else:
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token=unk, fuse_unk=True))
        if kind == "sentencepiece":  # Gemma: spaces replaced, no prefix, no pre-tokenizer
            tok.normalizer = normalizers.Replace(" ", "\u2581")
            tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
        else:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
            tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                             decoders.Metaspace(replacement="\u2581", prepend_scheme="first")])
        trainer = trainers.BpeTrainer(vocab_size=1400, special_tokens=specials + [f"<0x{b:02X}>" for b in range(256)],
                                      show_progress=False)
    tok.train([os.path.join(fixtures, "text", "tinyshakespeare.txt")], trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos,
              "clean_up_tokenization_spaces": False, "model_max_length": 131072}
    if unk:
        config["unk_token"] = unk
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)


def chat_token_goldens(fixtures, out):
    """The ids transformers' apply_chat_template(tokenize=True) gives, or the error it raised: every real chat
    template among the fixtures on the real Qwen3 and Phi-3 tokenizers (each with its own tokenizer_config.json), and
    each family's own templates on a tokenizer of its kind (FAMILY_CHAT_TOKENIZERS)."""
    from transformers import AutoTokenizer

    templates_dir = os.path.join(fixtures, "chat-templates")
    if not os.path.isdir(templates_dir):
        print(f"make_goldens: {templates_dir} absent, skipping the chat-template ids", file=sys.stderr)
        return
    templates = {}
    for file in sorted(os.listdir(templates_dir)):
        if file.endswith(".jinja"):
            with open(os.path.join(templates_dir, file), encoding="utf-8") as f:
                templates[file] = f.read()
    tokenizers = [(name, os.path.join(fixtures, "tokenizers", directory), list(templates))
                  for name, directory in (("qwen3", "qwen3"), ("phi-3", "phi-3-mini-4k-instruct"))]
    if os.path.exists(os.path.join(fixtures, "text", "tinyshakespeare.txt")):
        for name, kind, specials, added, bos, eos, unk, prefixes in FAMILY_CHAT_TOKENIZERS:
            path = os.path.abspath(os.path.join(out, "tokenizers", "chat", name))
            family_chat_tokenizer(fixtures, path, kind, specials, added, bos, eos, unk)
            tokenizers.append((name, path, [f for f in templates if any(f.startswith(p) for p in prefixes)]))
    result = {}
    for name, path, files in tokenizers:
        if not os.path.exists(os.path.join(path, "tokenizer.json")):
            continue
        tok = AutoTokenizer.from_pretrained(path)
        per_template = {}
        for file in files:
            template = templates[file]
            cases = []
            for messages in CONVERSATIONS:
                case = {"messages": messages}
                try:
                    ids = tok.apply_chat_template(messages, chat_template=template, tokenize=True, return_dict=False)
                    case["ids"] = [int(i) for i in ids]
                except Exception as e:  # the template's refusal (raise_exception) or a failure to render
                    case["error"] = f"{type(e).__name__}: {e}"
                cases.append(case)
            per_template[file] = cases
        result[name] = {"directory": path, "templates": per_template}
    with open(os.path.join(out, "chat_tokens.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
