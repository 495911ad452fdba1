"""Shared by the tool-calling tests: a real template with tool calls (Qwen 2.5's, Hermes' format, from the templates
llama.cpp ships), two tools and their schemas, a question and a history with a call and its result, and the start of
an answer that opens a call."""

from tests.chat_templates import template

QWEN_TEMPLATE = template("Qwen-Qwen2.5-7B-Instruct")
# A final assistant message is continued: the answer opens a call, which the 135M test model would not do by itself
# (llama.cpp's grammar of a forced call lets a model write text before its calls, and this one writes on).
OPENS_A_CALL = {"role": "assistant", "content": "<tool_call>\n"}

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city now",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "The time in a city now",
                                           "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
HISTORY = [*ASK,
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21, "sky": "sunny"}'}]
