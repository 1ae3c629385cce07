"""The target's tokenizer metadata (``tokenizer.*`` keys) for a drafter GGUF.

z-lab drafters ship no tokenizer, but mainline llama.cpp (``dflash``) and the
``dflash-draft`` forks load the drafter as a model with a vocabulary, and speculative
decoding checks it against the target's. So the drafter GGUF carries the **target's**
tokenizer, taken from one of:

* ``target_from_gguf``: the target already converted to GGUF (the common case). Every
  ``tokenizer.*`` key is copied unchanged: same order, types and values.
* ``target_from_hf_dir``: the target's Hugging Face dir. The vocabulary is rebuilt the way
  llama.cpp's ``convert_hf_to_gguf.py`` does for that architecture (DFlashModel.set_vocab
  delegates to the target architecture's set_vocab): SentencePiece (``tokenizer.model``) or
  GPT-2-style byte-level BPE (``tokenizer.json``), added/special tokens and their types,
  ``[PAD{i}]`` padding up to ``vocab_size``, merges, special ids, add_bos/add_eos, chat
  template — the facts of ``_create_vocab_sentencepiece``, ``get_vocab_base`` and gguf-py's
  ``SpecialVocab`` (llama-cpp-python 0.3.36's vendored copy), rewritten here. Whatever cannot
  be reproduced faithfully raises TargetError recommending ``--target-gguf``: a guessed
  vocabulary would load and then silently mis-tokenize.

``tokenizer.ggml.pre`` for BPE targets is decided like llama.cpp first: the sha256 of the ids
the tokenizer gives for llama.cpp's fixed check text, looked up in llama.cpp's table
(``get_vocab_base_pre``). When the hash is unknown (a fine-tune with edited vocab, or a tiny
test tokenizer, which llama.cpp's converter refuses) the ``tokenizer.json`` pre-tokenizer
definition is compared with the families whose llama.cpp runtime behaviour it fully
determines (``_FAMILIES``: split regex, byte-level flags, ignore_merges, clean-up of spaces);
no match → TargetError.

The library never prints: anything the user should hear is in ``TargetInfo.notes``.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from gguf import GGUFValueType as T

from ..config import DrafterConfig, load_target_config
from ..errors import ConfigError, TargetError, UsageError
from ..fileio.gguf_header import GGUFHeader, raw_string, read_header
from ..fileio.string_array import StringArray
from ..fileio.types import KV, kv_array, kv_bool, kv_str, kv_u32

_HINT = "pass --target-gguf T.gguf (the target converted by llama.cpp) instead"
_INSTALL = "pip install 'dflash-gguf[tokenizers]'"

# gguf TokenType / llama.cpp SentencePieceTokenTypes values.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Key names as gguf-py spells them (the normalizer keys are newer than gguf 0.19.0's Keys).
K_MODEL = "tokenizer.ggml.model"
K_PRE = "tokenizer.ggml.pre"
K_TOKENS = "tokenizer.ggml.tokens"
K_SCORES = "tokenizer.ggml.scores"
K_TOKEN_TYPE = "tokenizer.ggml.token_type"
K_MERGES = "tokenizer.ggml.merges"
K_ADD_PREFIX = "tokenizer.ggml.add_space_prefix"
K_MASK_ID = "tokenizer.ggml.mask_token_id"
K_CHAT_TEMPLATE = "tokenizer.chat_template"
K_CHAT_TEMPLATES = "tokenizer.chat_templates"
_ID_KEYS = {  # SpecialVocab type -> key; "cls" has no writer handler and is never written
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
    "sep": "tokenizer.ggml.seperator_token_id",  # sic, as in gguf-py
    "pad": "tokenizer.ggml.padding_token_id",
    "mask": K_MASK_ID,
    "eot": "tokenizer.ggml.eot_token_id",
    "eom": "tokenizer.ggml.eom_token_id",
}
_ADD_KEYS = {  # only these add_<typ>_token flags have writer handlers
    "bos": "tokenizer.ggml.add_bos_token",
    "eos": "tokenizer.ggml.add_eos_token",
    "sep": "tokenizer.ggml.add_sep_token",
}
K_NORM_LOWER = "tokenizer.ggml.normalizer.lowercase"
K_NORM_STRIP = "tokenizer.ggml.normalizer.strip_accents"
_SPECIAL_TYPES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")

# GGUF architectures of drafters: a drafter is never the target.
_DRAFTER_ARCHS = ("dflash", "dflash-draft", "eagle3")

# --- which vocab recipe llama.cpp's converter uses per target architecture ------------------
# (DFlashModel.set_vocab resolves the target's class from text_config.architectures or
# architectures and calls its set_vocab.) Anything not listed is refused.
_SPM_ELSE_BPE = frozenset({"Qwen2ForCausalLM", "Qwen2Model", "Qwen3ForCausalLM", "Qwen3Model"})
_BPE_ONLY = frozenset({
    "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM",
    "GptOssForCausalLM",
})
_LLAMA = frozenset({"LlamaForCausalLM", "LLaMAForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "LlamaModel"})

# --- BPE pre-tokenizer identification --------------------------------------------------------
# llama.cpp's check text (convert_hf_to_gguf.py get_vocab_base_pre), verbatim.
CHKTXT = (
    '\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\U0001f680 (normal) \U0001f636'
    '\u200d\U0001f32b\ufe0f (multiple emojis concatenated) \u2705 \U0001f999\U0001f999 3 '
    '33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 \u1780\u17b6\u1793\u17cb'
    '\u178f\u17c2\u1796\u17b7\u179f\u17c1\u179f\u17a2\u17b6\u1785\U0001f601 ?\u6211\u60f3'
    '\u5728apple\u5de5\u4f5c1314151\u5929\uff5e ------======= \u043d\u0435\u0449\u043e '
    '\u043d\u0430 \u0411\u044a\u043b\u0433\u0430\u0440\u0441\u043a\u0438 \'\'\'\'\'\'````'
    '```""""......!!!!!!?????? I\'ve been \'told he\'s there, \'RE you sure? \'M not sure'
    ' I\'ll make it, \'D you like some tea? We\'Ve a\'lL'
)

# sha256(str(token ids of CHKTXT)) -> tokenizer.ggml.pre, from llama.cpp's table in
# llama-cpp-python 0.3.36 (vendor/llama.cpp/conversion/base.py). Where the table lists a
# hash twice, the later entry wins there (sequential ifs), so it is the one kept here.
CHKHSH: dict[str, str] = {
    "b6e8e1518dc4305be2fe39c313ed643381c4da5db34a98f6a04c093f8afbe99b": "chatglm-bpe",  # THUDM/glm-4-9b-chat
    "81d72c7348a9f0ebe86f23298d37debe0a5e71149e29bd283904c02262b27516": "chatglm-bpe",  # THUDM/glm-4-9b-chat
    "a1336059768a55c99a734006ffb02203cd450fed003e9a71886c88acf24fdbc2": "glm4",  # THUDM/glm-4-9b-hf
    "9ca2dd618e8afaf09731a7cf6e2105b373ba6a1821559f258b272fe83e6eb902": "glm4",  # zai-org/GLM-4.5-Air
    "cdf5f35325780597efd76153d4d1c16778f766173908894c04afc20108536267": "glm4",  # zai-org/GLM-4.7-Flash
    "1431a23e583c97432bc230bff598d103ddb5a1f89960c8f1d1051aaa944d0b35": "minerva-7b",  # sapienzanlp/Minerva-7B-base-v1.0
    "7e57df22b1fe23a7b1e1c7f3dc4e3f96d43a4eb0836d0c6bdc3436d7b2f1c664": "hunyuan",  # tencent/Hunyuan-A13B-Instruct
    "bba3b3366b646dbdded5dbc42d59598b849371afc42f7beafa914afaa5b70aa6": "hunyuan-dense",  # tencent/Hunyuan-4B-Instruct
    "e6ddf9c6686791c12d698d34c31ab9be1fea9af5a3d9a6909783ab382198ae1c": "hy_v4",  # tencent/Hy4-preview
    "a6b57017d60e6edb4d88ecc2845188e0eb333a70357e45dcc9b53964a73bbae6": "falcon-h1",  # tiiuae/Falcon-H1-0.5B-Base
    "60476e1243776c4fb1b993dbd7a5f15ac22f83c80afdf425fa5ae01c8d44ef86": "falcon-h1",  # tiiuae/Falcon-H1-1B-Base
    "3eda48b4c4dc7de733d1a8b3e3b4a85243dbbf704da2ee9d42c6beced8897896": "falcon-h1",  # tiiuae/Falcon-H1-7B-Base
    "48f8e02c0359c0bbdd82f26909171fac1c18a457bb47573ed1fe3bbb2c1cfd4b": "falcon-h1",  # tiiuae/Falcon-H1-34B-Base
    "81212dc7cdb7e0c1074ca62c5aeab0d43c9f52b8a737be7b12a777c953027890": "kimi-k2",  # moonshotai/Kimi-K2-Base
    "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c": "qwen2",  # Qwen/Qwen3-Embedding-0.6B
    "1444df51289cfa8063b96f0e62b1125440111bc79a52003ea14b6eac7016fd5f": "qwen35",  # openbmb/MiniCPM-V-4_6
    "66b8d4e19ab16c3bfd89bce5d785fb7e0155e8648708a1f42077cb9fe002c273": "grok-2",  # alvarobartt/grok-2-tokenizer
    "b3d1dd861f1d4c5c0d2569ce36baf3f90fe8a102db3de50dd71ff860d91be3df": "jina-v2-de",  # aari1995/German_Semantic_V3
    "0fe1cf6eda062318a1af7270f3331a85c539a01778ff948e24388e949c5282f4": "gpt-2",  # evilfreelancer/ruGPT3XL
    "9e454714343b69b99b71795c1d27a68c2a1d15dab111f4d353109f966af29da7": "lfm2",  # LiquidAI/LFM2.5-8B-A1B
    "846deafc5b0fa786186fa4ae6c7b49903cf2f1d1895bdb80b9120d60be135252": "gemma4",  # danish-foundation-models/DFM-Mimir
    "0a766d034107bc736a3f2dc4968fd62e54a3570f1454443e0c5a4cc6bd7941ed": "spark2_5",  # XHToken/Spark-X2.5-1.7B
    "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe",  # meta-llama/Meta-Llama-3-8B
    "049ecf7629871e3041641907f3de7c733e4dbfdc736f57d882ba0b0845599754": "deepseek-llm",  # deepseek-ai/deepseek-llm-7b-base
    "347715f544604f9118bb75ed199f68779f423cabb20db6de6f31b908d04d7821": "deepseek-coder",  # deepseek-ai/deepseek-coder-6.7b-base
    "8aeee3860c56296a157a1fe2fad249ec40aa59b1bb5709f4ade11c4e6fe652ed": "falcon",  # tiiuae/falcon-7b
    "0876d13b50744004aa9aeae05e7b0647eac9d801b5ba4668afc01e709c15e19f": "jina-v2-en",  # jinaai/jina-embeddings-v2-base-en
    "9d032fcbd5501f4a38150912590928bfb36091efb5df11b8e2124b0390e3fb1e": "falcon3",  # tiiuae/Falcon3-7B-Base
    "8e62295832751ca1e8f92f2226f403dea30dc5165e448b5bfa05af5340c64ec7": "bert-bge-large",  # BAAI/bge-large-zh-v1.5
    "b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166": "olmo",  # allenai/OLMo-1.7-7B-hf
    "35d91631860c815f952d711435f48d356ebac988362536bed955d43bfa436e34": "starcoder",  # bigcode/starcoder2-3b
    "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454": "gpt-2",  # openai-community/gpt2
    "32d85c31273f8019248f2559fed492d929ea28b17e51d81d3bb36fff23ca72b3": "stablelm2",  # stabilityai/stablelm-2-zephyr-1_6b
    "6221ad2852e85ce96f791f476e0b390cf9b474c9e3d1362f53a24a06dc8220ff": "refact",  # smallcloudai/Refact-1_6-base
    "9c2227e4dd922002fb81bde4fc02b0483ca4f12911410dee2255e4987644e3f8": "command-r",  # CohereForAI/c4ai-command-r-v01
    "d772b220ace2baec124bed8cfafce0ead7d6c38a4b65ef11261cf9d5d62246d1": "tiny_aya",  # CohereLabs/tiny-aya-base
    "52df12b4c8d4176e7481aab4b6e8454d1fd0a210a04a574f6d4e067d10e23c3e": "cohere2moe",  # CohereLabs/North-Mini-Code-1.0
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",  # Qwen/Qwen1.5-7B
    "a8594e3edff7c29c003940395316294b2c623e09894deebbc65f33f1515df79e": "dbrx",  # databricks/dbrx-base
    "c7699093ba4255a91e702aa38a596aa81669f3525dae06c2953267dde580f448": "jina-v1-en",  # jinaai/jina-reranker-v1-tiny-en
    "171aeeedd6fb548d418a7461d053f11b6f1f1fc9b387bd66640d28a4b9f5c643": "jina-v2-es",  # jinaai/jina-embeddings-v2-base-es
    "27949a2493fc4a9f53f5b9b029c82689cfbe5d3a1929bb25e043089e28466de6": "jina-v2-de",  # jinaai/jina-embeddings-v2-base-de
    "a023e9fdc5a11f034d3ef515b92350e56fb2af1f66c6b6811a4444ea9bf8763d": "jina-v5-nano",  # jinaai/jina-embeddings-v5-text-nano
    "c136ed14d01c2745d4f60a9596ae66800e2b61fa45643e72436041855ad4089d": "smaug-bpe",  # abacusai/Smaug-Llama-3-70B-Instruct
    "c7ea5862a53e4272c035c8238367063e2b270d51faa48c0f09e9d5b54746c360": "poro-chat",  # LumiOpen/Poro-34B-chat
    "7967bfa498ade6b757b064f31e964dddbb80f8f9a4d68d4ba7998fcf281c531a": "jina-v2-code",  # jinaai/jina-embeddings-v2-base-code
    "7fc505bd3104ca1083b150b17d088b59534ede9bde81f0dd2090967d7fe52cee": "viking",  # LumiOpen/Viking-7B
    "b53802fb28e26d645c3a310b34bfe07da813026ec7c7716883404d5e0f8b1901": "jais",  # core42/jais-13b
    "bc5108ee1eb6a3d600cadd065f63190fbd0554dbc9e4bbd6a0d977970afc8d2a": "jais-2",  # inceptionai/Jais-2-8B-Chat
    "7b3e7548e4308f52a76e8229e4e6cc831195d0d1df43aed21ac6c93da05fec5f": "codeshell",  # WisdomShell/CodeShell-7B
    "63b97e4253352e6f357cc59ea5b583e3a680eaeaf2632188c2b952de2588485e": "tekken",  # mistralai/Mistral-Nemo-Base-2407
    "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249": "smollm",  # HuggingFaceTB/SmolLM-135M
    "3c30d3ad1d6b64202cd222813e7736c2db6e1bd6d67197090fc1211fbc612ae7": "bloom",  # bigscience/bloom
    "bc01ce58980e1db43859146dc51b1758b3b88729b217a74792e9f8d43e479d21": "gpt3-finnish",  # TurkuNLP/gpt3-finnish-small
    "4e2b24cc4770243d65a2c9ec19770a72f08cffc161adbb73fcbb6b7dd45a0aae": "exaone",  # LGAI-EXAONE/EXAONE-3.0-7.8B-Instruct
    "fcace8b9cac38ce847670c970cd5892031a753a1ef381abd1d9af00f713da085": "phi-2",  # microsoft/phi-2
    "60824e3c0d9401f89943cbb2fff727f0e2d4c545ba4df2d6e4f09a6db0f5b450": "chameleon",  # facebook/chameleon-7b
    "8b5a93ed704057481f240da0be7e7dca721d7f8f4755263b6807227a2cbeae65": "roberta-bpe",  # sentence-transformers/stsb-roberta-base
    "ad851be1dba641f2e3711822f816db2c265f788b37c63b4e1aeacb9ee92de8eb": "gigachat",  # ai-sage/GigaChat-20B-A3B-instruct
    "d4c8f286ea6b520b3d495c4455483cfa2302c0cfcd4be05d781b6a8a0a7cdaf1": "megrez",  # Infinigence/Megrez-3B-Instruct
    "877081d19cf6996e2c4ff0e1236341e9b7bde288f5311a56a937f0afbbb3aeb5": "deepseek-v3",  # deepseek-ai/DeepSeek-V3
    "b3f499bb4255f8ca19fccd664443283318f2fd2414d5e0b040fbdd0cc195d6c5": "deepseek-r1-qwen",  # deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B
    "ccc2ef013c104be7bae2965776d611e1d7a8a2a9c547dd93a682c9a9fc80352e": "gpt-4o",  # Xenova/gpt-4o
    "7dec86086fcc38b66b7bc1575a160ae21cf705be7718b9d5598190d7c12db76f": "superbpe",  # UW/OLMo2-8B-SuperBPE-t180k
    "1994ffd01900cfb37395608534236ecd63f2bd5995d6cb1004dda1af50240f15": "trillion",  # trillionlabs/Trillion-7B-preview
    "96a5f08be6259352137b512d4157e333e21df7edd3fcd152990608735a65b224": "bailingmoe",  # inclusionAI/Ling-lite
    "d353350c764d8c3b39c763113960e4fb4919bea5fbf208a0e3b22e8469dc7406": "llama4",  # meta-llama/Llama-4-Scout-17B-16E-Instruct
    "0e9433cbbb161f89e264eb32e8e64bfe69e834973ffca5d41d3948a604a3e2a3": "pixtral",  # mistral-community/pixtral-12b
    "d5f1dd6f980fec569fb218a81a7658ac45fc56b38c5a0adeb1c232fbe04ef5ec": "seed-coder",  # ByteDance-Seed/Seed-Coder-8B-Base
    "b0a6b1c0bd5998ebd9df08611efde34a4ff03faed45ae09c43e6b31ebd4b94cf": "a.x-4.0",  # skt/A.X-4.0
    "f6791d196f87ce6b56a7d234be618e0d58f8cda3549416635b2bebcd22cd95c4": "midm-2.0",  # K-intelligence/Midm-2.0-Base-Instruct
    "169bf0296a13c4d9b7672313f749eb36501d931022de052aad6e36f2bf34dd51": "lfm2",  # LiquidAI/LFM2.5-350M
    "2085e1638f6c377a0aa4ead21b27bb4cb941bf800df86ed391011769c1758dfb": "exaone4",  # LGAI-EXAONE/EXAONE-4.0-32B
    "a1e163ecab2e718a4c829d1148b6e86824ec36163bb71941c3dca9cd5ac25756": "mellum",  # JetBrains/Mellum-4b-base
    "a0b64b4385f123663873756336c085744376d015ff328bb1d901598f63c44152": "modern-bert",  # answerdotai/ModernBERT-base
    "49fc0303c9e0d2c2c565c510f64b2d9b271276acdcdadff733249eda9f7d59df": "afmoe",  # arcee-ai/Trinity-Tokenizer
    "9b1be57e70d20d9501b2b3186e792d81181ae36ada3903c26f9fea418cf87206": "bailingmoe2",  # inclusionAI/Ling-mini-base-2.0
    "53e325976a6e142379c19b09afcae354f2f496f147afa8f9e189a33fe4e3024e": "granite-docling",  # ibm-granite/granite-docling-258M
    "f4f37b6c8eb9ea29b3eac6bb8c8487c5ab7885f8d8022e67edc1c68ce8403e95": "minimax-m2",  # MiniMaxAI/MiniMax-M2
    "4a2e2abae11ca2b86d570fc5b44be4d5eb5e72cc8f22dd136a94b37da83ab665": "kormo",  # KORMo-Team/KORMo-tokenizer
    "9d70134b369a70e5735009b6de918f7581b5211f7c074d1f89f753aea8248af1": "youtu",  # tencent/Youtu-LLM-2B
    "16389f0a1f51ee53e562ffd51c371dc508639ab0e4261502071836e50e223e91": "solar-open",  # upstage/Solar-Open-100B
    "6c81ce329e0802883b22eabab0d3fa48357337ef1ecb45443828bf1f6254833f": "exaone-moe",  # LGAI-EXAONE/K-EXAONE-236B-A23B
    "d30d75d9059f1aa2c19359de71047b3ae408c70875e8a3ccf8c5fba56c9d8af4": "qwen35",  # Qwen/Qwen3.5-9B-Instruct
    "b4b8ca1f9769494fbd956ebc4c249de6131fb277a4a3345a7a92c7dd7a55808d": "joyai-llm",  # jdopensource/JoyAI-LLM-Flash
    "e4d54df1ebc1f2b91acd986c5b51aa50837d5faf7c7398e73c1f9e9ee5d19869": "kanana2",  # kakaocorp/kanana-2-30b-a3b-instruct-2601
    "862f827721df956049dff5ca81a57f29e575280bc622e290d3bf4e35eca29015": "f2llmv2",  # codefuse-ai/F2LLM-v2-4B
    "62f6fb0a6fd5098caeabb19b07a5c1099cafc8b9c40eab6ea89ece4ec02fbc57": "sarvam-moe",  # sarvamai/sarvam-30b
    "f728162c1315c26e40249849799b4ba3fe584c32084b4795b03eb295e63cb5af": "talkie",  # lewtun/talkie-1930-13b-it-hf
    "36f3066e97b7f3994b379aaacde306c1444c6ae84e81a5ae3cd2b7ed3b8c42d4": "minicpm5",  # openbmb/MiniCPM5-1B
    "f241072145675bf8322086f115aebad05e9f869557a238bf2150a2a417d1bf60": "granite-embed-multi-97m",  # ibm-granite/granite-embedding-97m-multilingual-r2
    "789696f5946cc0fc59371f39f6097cafed196b3acded6140432f26bbb1ae1669": "granite-embed-multi-311m",  # ibm-granite/granite-embedding-311m-multilingual-r2
    "9dcf830ee9990cdbf78cc523a5f7bd9ad8f3f9890c2d3581d2785ad10f07049d": "mellum2",  # JetBrains/Mellum2-12B-A2.5B-Base
    "972da7b59cec44d1f0a490a86c96df53859e486e481563e5dddac155013d87ac": "laguna",  # poolside/Laguna-XS.2
    "653660222fb704f61cbf2b618a8ae6502b7f8b20c980f9a5de07ed78e13319cd": "ufakzeka",  # ufakai/ufakzeka-1
}


@dataclass(frozen=True)
class _Family:
    """A BPE pre-tokenizer family whose llama.cpp runtime behaviour a tokenizer.json fully
    pins down: the split regex as the family's tokenizer.json spells it (quoted in
    llama.cpp's src/llama-vocab.cpp as "original regex from tokenizer.json"), ByteLevel
    without/with its own regex, and the two flags llama.cpp sets per family name
    (``ignore_merges``; ``clean_spaces``, which transformers calls clean_up_tokenization_spaces)."""

    name: str
    split_regex: str | None  # None: a lone ByteLevel(use_regex=true) pre-tokenizer (GPT-2)
    ignore_merges: bool
    clean_spaces: bool
    normalizers: tuple[str | None, ...]  # normalizer types the family's files use


_FAMILIES = (
    # Qwen2 / Qwen2.5 / Qwen3 (llama.cpp also names this behaviour deepseek-r1-qwen, kormo, f2llmv2).
    _Family("qwen2",
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+",
            ignore_merges=False, clean_spaces=False, normalizers=("NFC", None)),
    # Qwen3.5 / Qwen3.6: letters include marks (\p{M}).
    _Family("qwen35",
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+",
            ignore_merges=False, clean_spaces=False, normalizers=("NFC", None)),
    # Llama 3.x: digits in runs of 1-3, merges ignored for whole-word vocab hits.
    _Family("llama-bpe",
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+",
            ignore_merges=True, clean_spaces=True, normalizers=(None,)),
    # GPT-2: ByteLevel does the splitting with its built-in regex.
    _Family("gpt-2", None, ignore_merges=False, clean_spaces=True, normalizers=(None,)),
)
FAMILY_NAMES = tuple(f.name for f in _FAMILIES)


@dataclass(frozen=True)
class TargetInfo:
    """What the converter needs from the target: sizes to check the drafter against, and the
    ``tokenizer.*`` KVs to embed, in the order llama.cpp writes them."""

    source: Path
    source_kind: str  # "gguf" | "hf"
    arch: str  # GGUF general.architecture, or the HF architecture llama.cpp dispatches on
    model_type: str
    hidden_size: int
    num_hidden_layers: int  # depth that taps index (GGUF: block_count minus MTP/nextn layers)
    vocab_size: int  # rows of the target's embedding/lm_head, which the drafter borrows
    n_vocab_tokens: int  # entries in tokenizer.ggml.tokens (llama.cpp pads to vocab_size)
    tokenizer_model: str | None  # tokenizer.ggml.model: "gpt2", "llama", ...
    tokenizer_pre: str | None
    pre_source: str  # "copied" | "default" (SentencePiece) | "chkhsh" | "pre_tokenizer"
    kvs: tuple[KV, ...]
    notes: tuple[str, ...] = ()  # things the CLI should tell the user (never fatal)

    def get(self, key: str, default: Any = None) -> Any:
        for kv in self.kvs:
            if kv.key == key:
                return kv.value
        return default


# =============================================================================================
# public entry points
# =============================================================================================

def load_target(target_gguf: str | Path | None = None, target_dir: str | Path | None = None) -> TargetInfo | None:
    """The CLI's ``--target-gguf`` / ``--target-dir`` pair: at most one; None when neither.

    Raises:
        UsageError: both were given.
        TargetError, GGUFFormatError: see ``target_from_gguf`` / ``target_from_hf_dir``.
    """
    if target_gguf is not None and target_dir is not None:
        raise UsageError("pass either --target-gguf or --target-dir, not both (the GGUF is the exact copy; prefer it)")
    if target_gguf is not None:
        return target_from_gguf(target_gguf)
    if target_dir is not None:
        return target_from_hf_dir(target_dir)
    return None


def drafter_tokenizer_kvs(target: TargetInfo, mask_token_id: int | None) -> list[KV]:
    """The target's tokenizer KVs with the drafter's ``tokenizer.ggml.mask_token_id``.

    llama.cpp's DFlashModel writes the mask id after the vocab; GGUFWriter overwrites an
    existing key in place, so a mask id the target already had keeps its position.
    """
    out = list(target.kvs)
    if mask_token_id is None:
        return out
    mask = kv_u32(K_MASK_ID, mask_token_id)
    for i, kv in enumerate(out):
        if kv.key == K_MASK_ID:
            out[i] = mask
            return out
    out.append(mask)
    return out


def target_from_gguf(path: str | Path) -> TargetInfo:
    """Copy every ``tokenizer.*`` key of a target GGUF and read its sizes.

    Raises:
        TargetError: missing file, a drafter instead of a target, no tokenizer, or no
            embedding_length/block_count.
        GGUFFormatError: the file is truncated or corrupt.
    """
    p = Path(path)
    if not p.is_file():
        raise TargetError(f"--target-gguf {p}: no such file; pass the target model's .gguf (for split models, the first part)")
    header = read_header(p)
    arch = header.arch
    if not arch:
        raise TargetError(f"{p}: no general.architecture key; not a llama.cpp model GGUF (re-convert the target)")
    if arch in _DRAFTER_ARCHS or arch.endswith("-dflash-draft"):
        raise TargetError(f"{p}: is a drafter GGUF (architecture {arch}); --target-gguf takes the target model's GGUF")

    kvs: list[KV] = []
    raw_needed: list[str] = []
    for key in header.kv_order:
        if not key.startswith("tokenizer."):
            continue
        f = header.kv[key]
        if f.type == T.ARRAY:
            if f.sub_type == T.ARRAY:
                raise TargetError(f"{p}: {key} is a nested array, which no llama.cpp tokenizer key uses; re-convert the target")
            values = list(f.value)
            if f.sub_type == T.STRING and any("\ufffd" in v for v in values):
                raw_needed.append(key)
            kvs.append(KV(key, values, T.ARRAY, f.sub_type))
        else:
            if f.type == T.STRING and "\ufffd" in f.value:
                raw_needed.append(key)
            kvs.append(KV(key, f.value, f.type))
    if raw_needed:
        # The header reader decodes strings with replacement characters; U+FFFD may be
        # genuine or a stand-in for invalid UTF-8, so re-read those keys' raw bytes.
        raw = _raw_strings(header, raw_needed)
        kvs = [KV(kv.key, raw[kv.key], kv.type, kv.sub_type) if kv.key in raw else kv for kv in kvs]

    tokens = header.get(K_TOKENS)
    if tokens is None or header.get(K_MODEL) is None:
        raise TargetError(
            f"{p}: has no tokenizer ({K_TOKENS} / {K_MODEL} missing); pass the full target model GGUF, or --target-dir"
        )

    def need_u(key: str) -> int:
        v = header.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise TargetError(f"{p}: {key} is missing or not a positive integer; re-convert the target with a current llama.cpp")
        return v

    hidden = need_u(f"{arch}.embedding_length")
    depth = need_u(f"{arch}.block_count")
    notes = []
    nextn = header.get(f"{arch}.nextn_predict_layers")
    if isinstance(nextn, int) and not isinstance(nextn, bool) and 0 < nextn < depth:
        # MTP exports append the nextn layers to block_count; taps index the main stack.
        depth -= nextn
        notes.append(f"{p.name}: block_count includes {nextn} MTP layer(s); target depth taken as {depth}")
    vocab = header.get(f"{arch}.vocab_size")
    embd = header.tensors_by_name.get("token_embd.weight")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab <= 0:
        vocab = embd.shape_ne[1] if embd is not None and len(embd.shape_ne) == 2 else len(tokens)
    return TargetInfo(
        source=p, source_kind="gguf", arch=arch, model_type=arch,
        hidden_size=hidden, num_hidden_layers=depth, vocab_size=int(vocab), n_vocab_tokens=len(tokens),
        tokenizer_model=header.get(K_MODEL), tokenizer_pre=header.get(K_PRE), pre_source="copied",
        kvs=tuple(kvs), notes=tuple(notes),
    )


def target_from_hf_dir(path: str | Path) -> TargetInfo:
    """Build the target's tokenizer KVs from its Hugging Face dir, as llama.cpp would.

    Raises:
        TargetError: missing/unsupported tokenizer files or architecture, a tokenizer that
            cannot be reproduced faithfully, or the optional ``tokenizers``/``sentencepiece``
            packages are missing. Every message recommends ``--target-gguf``.
    """
    d = Path(path)
    if not d.is_dir():
        raise TargetError(f"--target-dir {d}: not a directory; pass the target's Hugging Face model dir, or --target-gguf")
    try:
        cfg = load_target_config(d)
    except ConfigError as exc:
        raise TargetError(f"target: {exc}") from None
    top = _read_json(d / "config.json")
    arch = _dispatch_arch(top)

    if arch in _LLAMA:
        kvs, model, pre, pre_src, notes = _llama_vocab(d, cfg.vocab_size, arch)
    elif arch in _SPM_ELSE_BPE:
        if (d / "tokenizer.model").is_file():
            kvs, model, pre, pre_src, notes = _spm_vocab(d, cfg.vocab_size)
        else:
            kvs, model, pre, pre_src, notes = _bpe_vocab(d, cfg.vocab_size)
    elif arch in _BPE_ONLY:
        kvs, model, pre, pre_src, notes = _bpe_vocab(d, cfg.vocab_size)
    else:
        raise TargetError(
            f"{d}: target architecture {arch or '(none)'}: rebuilding its tokenizer the way llama.cpp does is not "
            f"implemented here (supported: Llama, Qwen2/3, Qwen3-MoE/Next, Qwen3.5, gpt-oss); {_HINT}"
        )
    n_tokens = len(_kv(kvs, K_TOKENS).value)
    return TargetInfo(
        source=d, source_kind="hf", arch=arch, model_type=cfg.model_type,
        hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers, vocab_size=cfg.vocab_size,
        n_vocab_tokens=n_tokens, tokenizer_model=model, tokenizer_pre=pre, pre_source=pre_src,
        kvs=tuple(kvs), notes=tuple(notes),
    )


def check_drafter_fits(target: TargetInfo, drafter: DrafterConfig, fc_in_features: int | None = None) -> list[str]:
    """Check the drafter against the target it will borrow embeddings and hidden states from.

    ``fc_in_features`` is the fusion layer's input width from the weights (n_taps x target
    hidden) when the caller has it; otherwise the config's ``target_hidden_size`` (or the
    drafter's own hidden size, as the reference assumes) stands in.

    Returns:
        Warnings (non-fatal) for the CLI to show.
    Raises:
        TargetError: one line listing every mismatch (vocab, hidden size, taps, mask id).
    """
    problems: list[str] = []
    warnings: list[str] = []
    where = f"target {target.source}"
    if drafter.vocab_size != target.vocab_size:
        problems.append(
            f"vocab_size {drafter.vocab_size} (drafter) != {target.vocab_size} ({where}); the drafter borrows the "
            "target's embeddings and lm_head, so it must be the target it was trained for"
        )
    if fc_in_features is not None:
        n = drafter.n_taps
        if n == 0 or fc_in_features % n:
            problems.append(f"fc input width {fc_in_features} is not a multiple of the {n} target layers tapped")
        elif fc_in_features // n != target.hidden_size:
            problems.append(
                f"fc input width {fc_in_features} / {n} taps = {fc_in_features // n}, but {where} has hidden size "
                f"{target.hidden_size}"
            )
    else:
        expected = drafter.target_hidden_size or drafter.hidden_size
        if expected != target.hidden_size:
            src = "target_hidden_size" if drafter.target_hidden_size else "hidden_size (no target_hidden_size in config)"
            problems.append(f"drafter {src} = {expected}, but {where} has hidden size {target.hidden_size}")
    depth = target.num_hidden_layers
    bad = [t for t in drafter.target_layer_ids if not 0 <= t < depth]
    if bad:
        problems.append(f"target_layer_ids {list(bad)} are outside the target's {depth} layers (0..{depth - 1})")
    if drafter.num_target_layers is not None and drafter.num_target_layers != target.num_hidden_layers:
        # Not fatal by itself (taps are checked above), but it usually means the wrong target.
        warnings.append(
            f"drafter was trained on a {drafter.num_target_layers}-layer target (num_target_layers), but {where} has "
            f"{target.num_hidden_layers} layers; is this the target it was trained for?"
        )
    n_vocab = min(target.vocab_size, target.n_vocab_tokens)
    if not 0 <= drafter.mask_token_id < n_vocab:
        problems.append(f"mask_token_id {drafter.mask_token_id} is outside the target vocabulary ({n_vocab} tokens)")
    if problems:
        raise TargetError(f"drafter {drafter.path} does not fit the target: " + "; ".join(problems))
    return warnings


# =============================================================================================
# HF dir: helpers
# =============================================================================================

def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TargetError(f"{path}: not readable JSON ({exc}); re-download the target's files, or {_HINT}") from None


def _dispatch_arch(top: dict) -> str:
    """The architecture llama.cpp's ``get_model_architecture(..., TEXT)`` picks."""
    arch = None
    archs = top.get("architectures")
    if isinstance(archs, list) and archs:
        arch = archs[0]
    text = top.get("text_config")
    if isinstance(text, dict) and isinstance(text.get("architectures"), list) and text["architectures"]:
        arch = text["architectures"][0]
    return str(arch or "")


def _kv(kvs: Sequence[KV], key: str) -> KV:
    return next(kv for kv in kvs if kv.key == key)


def _looks_special(text: str) -> bool:
    """llama.cpp's ``does_token_look_special``: added tokens some models forget to mark."""
    return (
        text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
        or (text.startswith("<|") and text.endswith("|>"))
        or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
        or (text.startswith("<unused") and text.endswith(">"))
    )


def _import_tokenizers(d: Path):
    try:
        import tokenizers  # noqa: F401
        from tokenizers import Tokenizer
    except ImportError:
        raise TargetError(f"{d}/tokenizer.json: reading it needs the 'tokenizers' package: {_INSTALL}, or {_HINT}") from None
    return Tokenizer


def _tokenizer_config(d: Path) -> dict | None:
    p = d / "tokenizer_config.json"
    if not p.is_file():
        return None
    cfg = _read_json(p)
    if not isinstance(cfg, dict):
        raise TargetError(f"{p}: top level is not a JSON object; re-download it, or {_HINT}")
    return cfg


# --- Llama: LlamaModel.set_vocab ------------------------------------------------------------

def _llama_vocab(d: Path, vocab_size: int, arch: str):
    if (d / "tekken.json").is_file() and not (d / "tokenizer.json").is_file():
        raise TargetError(
            f"{d}: Mistral tekken tokenizer (tekken.json) is converted by llama.cpp's mistral path, not reproduced here; {_HINT}"
        )
    tc = _tokenizer_config(d)
    if tc and tc.get("tokenizer_class") == "HybridDNATokenizer":
        raise TargetError(f"{d}: HybridDNATokenizer is not reproduced here; {_HINT}")
    if vocab_size in (32016, 49152):
        # llama.cpp adds CodeLlama FIM ids (32016) or forces add_bos off (49152) by vocab size.
        raise TargetError(
            f"{d}: vocab_size {vocab_size} takes a llama.cpp special case (CodeLlama/Granite) not reproduced here; {_HINT}"
        )
    head: list[KV] = []
    if tc and isinstance(tc.get("add_prefix_space"), bool):
        head.append(kv_bool(K_ADD_PREFIX, tc["add_prefix_space"]))
    elif tc and tc.get("add_prefix_space") is not None:
        raise TargetError(f"{d}/tokenizer_config.json: add_prefix_space={tc['add_prefix_space']!r} is not true/false; {_HINT}")
    if (d / "tokenizer.model").is_file():
        kvs, model, pre, src, notes = _spm_vocab(d, vocab_size)
    else:
        tj_path = d / "tokenizer.json"
        if tj_path.is_file():
            tj = _read_json(tj_path)
            m = tj.get("model") if isinstance(tj, dict) else None
            if not isinstance(m, dict):
                raise TargetError(f"{tj_path}: has no model section; re-download it, or {_HINT}")
            is_llama3 = m.get("type") == "BPE" and m.get("ignore_merges", False) and not m.get("byte_fallback", True)
            dec = tj.get("decoder") or {}
            spm_like = m.get("type") == "BPE" and m.get("byte_fallback", False) and dec.get("type") == "Sequence"
            if not is_llama3 and spm_like:
                raise TargetError(
                    f"{d}: SentencePiece-style tokenizer.json without tokenizer.model (llama.cpp's LlamaHfVocab path) "
                    f"is not reproduced here; add the target's tokenizer.model, or {_HINT}"
                )
        kvs, model, pre, src, notes = _bpe_vocab(d, vocab_size)
    return head + kvs, model, pre, src, notes


# --- SentencePiece: _set_vocab_sentencepiece -------------------------------------------------

def _spm_vocab(d: Path, vocab_size: int):
    try:
        from sentencepiece import SentencePieceProcessor
    except ImportError:
        raise TargetError(f"{d}/tokenizer.model: reading it needs the 'sentencepiece' package: {_INSTALL}, or {_HINT}") from None
    path = d / "tokenizer.model"
    sp = SentencePieceProcessor()
    try:
        sp.LoadFromFile(str(path))
    except (OSError, RuntimeError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TargetError(f"{path}: sentencepiece cannot load it ({why}); re-download it, or {_HINT}") from None
    n_sp = sp.vocab_size()
    if n_sp > vocab_size:
        # llama.cpp truncates with a warning; a vocab cut short is not one to embed.
        raise TargetError(f"{path}: {n_sp} pieces but config.json vocab_size is {vocab_size}; fix the config, or {_HINT}")
    notes: list[str] = []
    tokens: list[str] = [f"[PAD{i}]" for i in range(vocab_size)]
    scores: list[float] = [-10000.0] * vocab_size
    types: list[int] = [UNUSED] * vocab_size
    for i in range(n_sp):
        if sp.IsUnknown(i):
            t = UNKNOWN
        elif sp.IsControl(i):
            t = CONTROL
        elif sp.IsUnused(i):
            t = UNUSED
        elif sp.IsByte(i):
            t = BYTE
        else:
            t = NORMAL
        tokens[i], scores[i], types[i] = sp.IdToPiece(i), float(sp.GetScore(i)), t

    added_path = d / "added_tokens.json"
    if added_path.is_file():
        added = _read_json(added_path)
        if not isinstance(added, dict):
            raise TargetError(f"{added_path}: not a {{token: id}} object; {_HINT}")
        for text, tid in added.items():
            if not isinstance(tid, int) or tid < 0:
                raise TargetError(f"{added_path}: id {tid!r} of {text!r} is not a token id; {_HINT}")
            if tid >= vocab_size:
                notes.append(f"added token {text!r} id {tid} is past vocab_size {vocab_size}; skipped (as llama.cpp does)")
                continue
            tokens[tid], scores[tid], types[tid] = text, -1000.0, USER_DEFINED

    tc = _tokenizer_config(d)
    if tc is not None:
        decoder = tc.get("added_tokens_decoder", {})
        if not isinstance(decoder, dict):
            raise TargetError(f"{d}/tokenizer_config.json: added_tokens_decoder is not an object; {_HINT}")
        for sid, data in decoder.items():
            try:
                tid = int(sid)
                text = data["content"]
            except (ValueError, TypeError, KeyError):
                raise TargetError(f"{d}/tokenizer_config.json: added_tokens_decoder entry {sid!r} is malformed; {_HINT}") \
                    from None
            if not isinstance(text, str) or tid < 0:
                raise TargetError(f"{d}/tokenizer_config.json: added_tokens_decoder entry {sid!r} is malformed; {_HINT}")
            if tid >= vocab_size:
                notes.append(f"added token {text!r} id {tid} is past vocab_size {vocab_size}; skipped (as llama.cpp does)")
                continue
            if data.get("special") or _looks_special(text):
                types[tid] = CONTROL
            else:
                text = text.replace("\u2581", " ")  # llama.cpp pre-normalizes user-defined spaces
                types[tid] = USER_DEFINED
            tokens[tid], scores[tid] = text, -1000.0

    kvs = [
        kv_str(K_MODEL, "llama"),
        kv_str(K_PRE, "default"),
        kv_array(K_TOKENS, tokens, T.STRING),
        kv_array(K_SCORES, scores, T.FLOAT32),
        kv_array(K_TOKEN_TYPE, types, T.INT32),
    ]
    kvs += _special_vocab(d, load_merges=False, n_vocab=len(tokens), notes=notes)
    return kvs, "llama", "default", "default", notes


# --- GPT-2-style BPE: _set_vocab_gpt2 / get_vocab_base ---------------------------------------

def _bpe_vocab(d: Path, vocab_size: int):
    tj_path = d / "tokenizer.json"
    if not tj_path.is_file():
        have = [n for n in ("vocab.json", "merges.txt", "tokenizer.model", "tiktoken.model") if (d / n).is_file()]
        extra = f" (found only {', '.join(have)})" if have else ""
        raise TargetError(
            f"{d}: no tokenizer.json{extra}; the target's tokenizer files are needed to build its vocab — "
            f"download them with the model, or {_HINT}"
        )
    Tokenizer = _import_tokenizers(d)
    tj = _read_json(tj_path)
    try:
        tok = Tokenizer.from_file(str(tj_path))
    except Exception as exc:  # tokenizers raises bare Exception subclasses for bad files
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TargetError(f"{tj_path}: the tokenizers package cannot load it ({why}); {_HINT}") from None
    # transformers encodes without the file's truncation/padding settings; so must the hash.
    tok.no_truncation()
    tok.no_padding()
    tc = _tokenizer_config(d)
    notes: list[str] = []

    vocab = tok.get_vocab(with_added_tokens=True)
    if not vocab:
        raise TargetError(f"{tj_path}: empty vocabulary; {_HINT}")
    if max(vocab.values()) >= vocab_size:
        raise TargetError(
            f"{tj_path}: token id {max(vocab.values())} is past config.json vocab_size {vocab_size}; fix the config, or {_HINT}"
        )
    decoder = tok.get_added_tokens_decoder()  # id -> AddedToken
    _check_added_tokens_agree(d, tc, decoder, vocab)
    added_by_text = {at.content: i for i, at in decoder.items()}
    reverse = {i: t for t, i in vocab.items()}
    if len(reverse) != len(vocab):
        raise TargetError(f"{tj_path}: two tokens share an id; {_HINT}")

    pre, pre_src, pre_note = _decide_pre(tok, tj, tc, tj_path)
    if pre_note:
        notes.append(pre_note)

    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        text = reverse.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
            continue
        if text in added_by_text:
            at = decoder.get(i)
            if at is None:
                raise TargetError(f"{tj_path}: {text!r} is both vocab id {i} and added token id {added_by_text[text]}; {_HINT}")
            if not at.normalized:
                # llama.cpp stores non-normalized added tokens as the tokenizer round-trips
                # them (transformers decode(encode(t))); a change there involves transformers'
                # own clean-up rules, so refuse rather than guess.
                back = tok.decode(tok.encode(text, add_special_tokens=False).ids, skip_special_tokens=False)
                if back != text:
                    raise TargetError(
                        f"{tj_path}: added token {text!r} (id {i}) round-trips to {back!r}; how llama.cpp "
                        f"stores it depends on transformers, so {_HINT}"
                    )
            if at.special or _looks_special(text):
                types.append(CONTROL)
            else:
                text = text.replace("\u2581", " ")
                types.append(USER_DEFINED)
        else:
            types.append(NORMAL)
        tokens.append(text)

    kvs = [
        kv_str(K_MODEL, "gpt2"),
        kv_str(K_PRE, pre),
        kv_array(K_TOKENS, tokens, T.STRING),
        kv_array(K_TOKEN_TYPE, types, T.INT32),
    ]
    kvs += _special_vocab(d, load_merges=True, n_vocab=None, notes=notes, tj=tj)
    if not any(kv.key == K_MERGES for kv in kvs):
        raise TargetError(f"{d}: BPE tokenizer without merges (tokenizer.json model.merges / merges.txt); {_HINT}")
    return kvs, "gpt2", pre, pre_src, notes


def _check_added_tokens_agree(d: Path, tc: dict | None, decoder: dict, vocab: dict) -> None:
    """transformers merges tokenizer_config.json's added/special tokens into the vocab it
    hands llama.cpp; we read tokenizer.json alone, so refuse when the two files disagree."""
    if not tc:
        return
    tc_added = tc.get("added_tokens_decoder") or {}
    if isinstance(tc_added, dict):
        for sid, data in tc_added.items():
            try:
                tid, text = int(sid), data["content"]
            except (ValueError, TypeError, KeyError):
                raise TargetError(f"{d}/tokenizer_config.json: added_tokens_decoder entry {sid!r} is malformed; {_HINT}") \
                    from None
            at = decoder.get(tid)
            if at is None or at.content != text or bool(data.get("special", False)) != bool(at.special):
                raise TargetError(
                    f"{d}: tokenizer_config.json's added token {tid} {text!r} disagrees with tokenizer.json's "
                    f"added_tokens; the vocab transformers builds from them is ambiguous, so {_HINT}"
                )
    names: list[Any] = [tc.get(f"{t}_token") for t in _SPECIAL_TYPES]
    for key in ("additional_special_tokens", "extra_special_tokens"):
        extra = tc.get(key)
        names += list(extra.values()) if isinstance(extra, dict) else list(extra or [])
    for name in names:
        text = name.get("content") if isinstance(name, dict) else name
        if isinstance(text, str) and text not in vocab:
            # transformers would append it as a new token; llama.cpp's vocab would then differ.
            raise TargetError(
                f"{d}: tokenizer_config.json names special token {text!r}, which tokenizer.json does not "
                f"have; transformers would add it to the vocab, so {_HINT}"
            )


def _decide_pre(tok, tj: dict, tc: dict | None, where: Path) -> tuple[str, str, str | None]:
    """tokenizer.ggml.pre: llama.cpp's hash table first, then the pre_tokenizer definition."""
    ids = tok.encode(CHKTXT).ids  # add_special_tokens defaults to True, as in transformers
    chkhsh = hashlib.sha256(str(list(ids)).encode()).hexdigest()
    if chkhsh in CHKHSH:
        return CHKHSH[chkhsh], "chkhsh", None
    family = _match_family(tj, tc)
    if family is None:
        raise TargetError(
            f"{where}: BPE pre-tokenizer not recognised (chkhsh {chkhsh[:12]}... is not in llama.cpp's table and the "
            f"pre_tokenizer is none of {', '.join(FAMILY_NAMES)}); {_HINT}"
        )
    note = (
        f"tokenizer.ggml.pre = {family.name!r} from tokenizer.json's pre_tokenizer (chkhsh {chkhsh[:12]}... is not in "
        f"llama.cpp's table, whose converter would refuse this tokenizer)"
    )
    return family.name, "pre_tokenizer", note


def _match_family(tj: dict, tc: dict | None) -> _Family | None:
    model = tj.get("model") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback", False):
        return None
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    if (tj.get("decoder") or {}).get("type") != "ByteLevel":
        return None
    norm = tj.get("normalizer")
    norm_type = None if norm is None else norm.get("type")
    clean = bool((tc or {}).get("clean_up_tokenization_spaces", False))
    ignore_merges = bool(model.get("ignore_merges", False))
    split = _split_regex(tj.get("pre_tokenizer"))
    for fam in _FAMILIES:
        if (split == fam.split_regex and ignore_merges == fam.ignore_merges and clean == fam.clean_spaces
                and norm_type in fam.normalizers):
            return fam
    return None


_NO_MATCH = object()


def _split_regex(pre: Any) -> Any:
    """The Split regex of a [Split(regex, Isolated), ByteLevel(no prefix, no regex)] sequence;
    None for a lone ByteLevel(no prefix, regex); a sentinel for anything else."""
    def bytelevel(p: Any, use_regex: bool) -> bool:
        return (isinstance(p, dict) and p.get("type") == "ByteLevel" and not p.get("add_prefix_space", False)
                and bool(p.get("use_regex", True)) == use_regex)

    if bytelevel(pre, True):
        return None
    if not isinstance(pre, dict) or pre.get("type") != "Sequence":
        return _NO_MATCH
    seq = pre.get("pretokenizers") or []
    if len(seq) != 2 or not bytelevel(seq[1], False):
        return _NO_MATCH
    split = seq[0]
    if not (isinstance(split, dict) and split.get("type") == "Split" and split.get("behavior") == "Isolated"
            and not split.get("invert", False)):
        return _NO_MATCH
    pattern = split.get("pattern") or {}
    return pattern.get("Regex", _NO_MATCH)


# --- gguf-py SpecialVocab ----------------------------------------------------------------------

def _special_vocab(d: Path, *, load_merges: bool, n_vocab: int | None, notes: list[str], tj: Any = None) -> list[KV]:
    """The KVs gguf-py's ``SpecialVocab(d, load_merges, n_vocab).add_to_gguf`` writes, in
    its order: merges, special ids, add_*_token flags, chat template, normalizer flags.
    ``tj``: tokenizer.json already parsed (it is only read here, never changed)."""
    types: list[str] = list(_SPECIAL_TYPES)
    ids: dict[str, int] = {}
    add: dict[str, bool] = {}
    merges: list[str] = []
    lower: bool | None = None
    strip: bool | None = None

    def set_id(typ: str, tid: Any) -> None:
        if not isinstance(tid, int):
            return
        if tid < 0:
            raise TargetError(f"{d}: special token {typ} has id {tid}; fix the config, or {_HINT}")
        if n_vocab is None or tid < n_vocab:
            ids.setdefault(typ, tid)
        else:
            notes.append(f"special token {typ} id {tid} is past the {n_vocab}-token vocab; skipped (as llama.cpp does)")

    def parse_normalizer(n: Any) -> None:
        nonlocal lower, strip
        if not isinstance(n, dict):
            return
        t = n.get("type")
        if t == "Lowercase":
            lower = True
        elif t == "StripAccents":
            strip = True
        elif t == "BertNormalizer":
            if "lowercase" in n:
                lower = n["lowercase"]
            if "strip_accents" in n:
                strip = n["strip_accents"]
        elif t == "Sequence":
            for sub in n.get("normalizers", []):
                parse_normalizer(sub)

    # --- tokenizer.json: merges, normalizer, post-processor ---
    tj_path = d / "tokenizer.json"
    if tj_path.is_file():
        if tj is None:
            tj = _read_json(tj_path)
        if load_merges:
            merges = _merges_from_json(tj, tj_path)
        if tj.get("normalizer"):
            parse_normalizer(tj["normalizer"])
        added_tokens = tj.get("added_tokens", [])
    else:
        added_tokens = []
    tc = _tokenizer_config(d)  # a fresh copy: SpecialVocab's logic writes into it
    if tj:
        bos, cls = (tc or {}).get("bos_token"), (tc or {}).get("cls_token")
        eos, sep = (tc or {}).get("eos_token"), (tc or {}).get("sep_token")
        if not bos and cls and tc:
            tc["bos_token"] = bos = cls
        if not eos and sep and tc:
            tc["eos_token"] = eos = sep
        post = tj.get("post_processor")
        if post:
            for proc in post.get("processors", [post]):
                ptype = proc.get("type")
                if ptype == "ByteLevel":
                    add.setdefault("bos", False)
                    add.setdefault("eos", False)
                elif ptype == "RobertaProcessing":
                    add["bos"] = add["eos"] = add["sep"] = True
                    if not cls and tc:
                        cls = proc.get("cls", [bos])[0]
                        tc["cls_token"] = cls
                    if not sep and tc:
                        sep = proc.get("sep", [eos])[0]
                        tc["sep_token"] = sep
                elif ptype == "TemplateProcessing":
                    bos, eos, cls, sep = _template_processing(proc, tc, add, types, bos, eos, cls, sep)

    # --- tokenizer_config.json: chat template, add_* flags, special tokens by content ---
    template: Any = None
    if tc:
        alt: Any = None
        jinja, tjson = d / "chat_template.jinja", d / "chat_template.json"
        if jinja.is_file():
            alt = jinja.read_text(encoding="utf-8")
            extra = sorted((d / "additional_chat_templates").glob("*.jinja"))
            if extra:
                alt = [{"name": "default", "template": alt}] + [
                    {"name": p.stem, "template": p.read_text(encoding="utf-8")} for p in extra
                ]
        elif tjson.is_file():
            doc = _read_json(tjson)
            alt = doc.get("chat_template") if isinstance(doc, dict) else None
        template = tc.get("chat_template", alt)
        if template is not None and not isinstance(template, (str, list)):
            notes.append("tokenizer_config.json chat_template has an unexpected type; not embedded (as llama.cpp does)")
            template = None
        for typ in types:
            flag = tc.get(f"add_{typ}_token")
            if isinstance(flag, bool) and typ not in add:
                add[typ] = flag
            entry = tc.get(f"{typ}_token")
            if isinstance(entry, dict):
                entry = entry.get("content")
            if not isinstance(entry, str):
                continue
            tid = next((a.get("id") for a in added_tokens if a.get("content") == entry), None)
            set_id(typ, tid)

    # --- config.json: <typ>_token_id (root, then text_config) ---
    cfg_path = d / "config.json"
    if cfg_path.is_file():
        cfg = _read_json(cfg_path)
        for typ in types:
            tid = cfg.get(f"{typ}_token_id")
            if tid is None and isinstance(cfg.get("text_config"), dict):
                tid = cfg["text_config"].get(f"{typ}_token_id")
            set_id(typ, tid)

    if load_merges and not merges:
        merges = _merges_from_txt(d / "merges.txt")

    out: list[KV] = []
    if merges:
        out.append(kv_array(K_MERGES, merges, T.STRING))
    for typ, tid in ids.items():
        if typ in _ID_KEYS:
            out.append(kv_u32(_ID_KEYS[typ], tid))
    for typ, flag in add.items():
        if typ in _ADD_KEYS:
            out.append(kv_bool(_ADD_KEYS[typ], flag))
    out += _chat_template_kvs(template)
    if lower is not None:
        out.append(kv_bool(K_NORM_LOWER, bool(lower)))
    if strip is not None:
        out.append(kv_bool(K_NORM_STRIP, bool(strip)))
    return out


def _template_processing(proc: dict, tc: dict | None, add: dict, types: list, bos, eos, cls, sep):
    """SpecialVocab's reading of a TemplateProcessing post-processor: which special tokens
    wrap a single sequence (add_bos/add_eos, possibly a new eos with the old one as eot/eom)
    and whether a pair gets a separator (add_sep). Same decisions, same crude rules."""
    single = proc.get("single", [])
    pair = proc.get("pair", [])
    first = last = None
    if len(single) > 1:
        first = single[0].get("SpecialToken", {}).get("id")
        if first:
            if not tc:
                bos = first
            elif first not in (bos, cls):
                if not bos:
                    tc["bos_token"] = bos = first
                if not cls:
                    tc["cls_token"] = cls = first
            add["bos"] = first in (bos, cls)
        last = single[-1].get("SpecialToken", {}).get("id")
        if last:
            if not tc:
                eos = last
            elif last != eos:
                if "eot" not in types:
                    types.append("eot")
                    tc["eot_token"] = eos
                elif "eom" not in types:
                    types.append("eom")
                    tc["eom_token"] = eos
                tc["eos_token"] = eos = last
            add["eos"] = last == eos
    if pair:
        start = 1 if first and pair[0].get("SpecialToken", {}).get("id") == first else 0
        stop = -1 if last and pair[-1].get("SpecialToken", {}).get("id") == last else None
        pair = pair[slice(start, stop)]
        if pair:
            a = pair[0].get("Sequence", {}).get("id")
            b = pair[-1].get("Sequence", {}).get("id")
            middle = pair[1:-1]
            if a == "A" and b == "B" and middle:
                add_sep = False
                entry = middle[0].get("SpecialToken", {}).get("id")
                if entry and entry in (sep, eos) and not last:
                    add_sep = True
                if len(middle) == 2:
                    entry = middle[1].get("SpecialToken", {}).get("id")
                    if entry and entry in (sep, eos):
                        add_sep = True
                add["sep"] = add_sep
                if add_sep and not sep and tc:
                    tc["sep_token"] = eos
    return bos, eos, cls, sep


def _merges_from_json(tj: dict, where: Path) -> list[str]:
    merges = (tj.get("model") or {}).get("merges")
    if not isinstance(merges, list) or not merges:
        return []
    if isinstance(merges[0], str):
        return list(merges)
    if isinstance(merges[0], list) and len(merges[0]) == 2 and isinstance(merges[0][0], str):
        # Pair form (transformers >= 4.45): llama.cpp joins with a space and writes a space
        # inside a part as U+0120 (chr(ord(" ") + 256)), the byte-level spelling of " ".
        return [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair) for pair in merges]
    raise TargetError(f"{where}: model.merges has an unknown format; {_HINT}")


def _merges_from_txt(path: Path) -> list[str]:
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines and lines[0].strip().startswith("#"):
        lines = lines[1:]
    out = []
    for line in lines:
        parts = line.strip().split(None, 3)
        if len(parts) == 2:  # llama.cpp skips malformed lines with a warning
            out.append(f"{parts[0]} {parts[1]}")
    return out


def _chat_template_kvs(template: Any) -> list[KV]:
    if template is None:
        return []
    if isinstance(template, str):
        return [kv_str(K_CHAT_TEMPLATE, template)]
    out: list[KV] = []
    names: list[str] = []
    default = None
    for choice in template:
        if not isinstance(choice, dict):
            continue
        name = "".join(c if c.isascii() and c.isalnum() else "_" for c in str(choice.get("name", "")))
        body = choice.get("template")
        if not name or body is None:
            continue
        if name == "default":
            default = body
        else:
            if name not in names:
                names.append(name)
            out.append(kv_str(f"{K_CHAT_TEMPLATE}.{name}", body))
    if names:
        # gguf-py collects the names in a set (arbitrary order); we keep file order.
        out.append(kv_array(K_CHAT_TEMPLATES, names, T.STRING))
    if default is not None:
        out.append(kv_str(K_CHAT_TEMPLATE, default))
    return out


# --- raw string fallback for target_from_gguf --------------------------------------------------

def _raw_strings(header: GGUFHeader, keys: Iterable[str]) -> dict[str, Any]:
    """Values of string / string-array keys with undecodable bytes kept as ``bytes``."""
    def item(b: bytes) -> str | bytes:
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return b

    out: dict[str, Any] = {}
    for key in keys:
        f = header.kv[key]
        if isinstance(f.value, StringArray):
            out[key] = [item(b) for b in f.value.raw_items()]
        else:
            out[key] = item(raw_string(header.path, f))
    return out


__all__ = [
    "CHKHSH", "CHKTXT", "FAMILY_NAMES", "TargetInfo", "check_drafter_fits", "drafter_tokenizer_kvs",
    "load_target", "target_from_gguf", "target_from_hf_dir",
]
