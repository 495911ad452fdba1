// llm-worker's C ABI over llama.cpp's chat layer (common/chat.h): the templates llama-server applies, the grammar,
// triggers, preserved tokens and stops it samples under, and the parser it reads an answer with, whole or streamed.
// libcommon is C++ with no C API, so llama-cpp-python has no binding for it; this file is that binding, loaded with
// ctypes (worker/engine/native/chat_layer.py). Everything crosses as JSON text, in and out: one call per request to
// render, one per streamed piece to parse. Every call catches what llama.cpp throws and returns {"error": "..."}:
// no exception crosses the C boundary.
//
// Built beside libllama by scripts/build-llama-cpp (hook.cmake adds this folder to llama.cpp's CMake project).

#include "chat.h"
#include "json.h"
#include "llama.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <set>
#include <string>

using json = common_json;

#if defined(_WIN32)
#    define LWC_API extern "C" __declspec(dllexport)
#else
#    define LWC_API extern "C" __attribute__((visibility("default")))
#endif

namespace {

char * owned(const std::string & text) {
    char * out = static_cast<char *>(std::malloc(text.size() + 1));
    if (out != nullptr) {
        std::memcpy(out, text.c_str(), text.size() + 1);
    }
    return out;
}

char * error_json(const char * what) {
    json out = json::object();
    out["error"] = std::string(what);
    return owned(out.dump_safe());
}

template <typename F> char * guarded(F && body) {
    try {
        return owned(body().dump_safe());
    } catch (const std::exception & e) {
        return error_json(e.what());
    } catch (...) {
        return error_json("unknown error in llama.cpp's chat layer");
    }
}

const char * trigger_type_name(common_grammar_trigger_type type) {
    switch (type) {
        case COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN:        return "token";
        case COMMON_GRAMMAR_TRIGGER_TYPE_WORD:         return "word";
        case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN:      return "pattern";
        case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL: return "pattern_full";
    }
    return "unknown";
}

json string_list(const std::vector<std::string> & items) {
    json out = json::array();
    for (const auto & item : items) {
        out.push_back(item);
    }
    return out;
}

common_chat_templates_inputs read_inputs(const json & in) {
    common_chat_templates_inputs inputs;
    inputs.messages = common_chat_msgs_parse_oaicompat(in.at("messages"));
    if (in.contains("tools") && !in.at("tools").is_null()) {
        inputs.tools = common_chat_tools_parse_oaicompat(in.at("tools"));
    }
    inputs.tool_choice = common_chat_tool_choice_parse_oaicompat(in.value("tool_choice", std::string("auto")));
    inputs.parallel_tool_calls = in.value("parallel_tool_calls", false);
    inputs.add_generation_prompt = in.value("add_generation_prompt", true);
    if (in.contains("continue_final_message")) {
        inputs.continue_final_message = common_chat_continuation_parse(in.at("continue_final_message"));
    }
    inputs.reasoning_format = common_reasoning_format_from_name(in.value("reasoning_format", std::string("none")));
    inputs.enable_thinking = in.value("enable_thinking", true);
    if (in.contains("json_schema") && !in.at("json_schema").is_null()) {
        inputs.json_schema = in.at("json_schema").dump();
    }
    if (in.contains("chat_template_kwargs")) {
        for (const auto & item : in.at("chat_template_kwargs").items()) {
            inputs.chat_template_kwargs[item.key()] = item.value().dump();
        }
    }
    if (in.contains("now")) {  // seconds since the epoch: a template's date the same on every render
        inputs.now = std::chrono::system_clock::time_point(std::chrono::seconds(in.at("now").get<int64_t>()));
    }
    return inputs;
}

json params_json(const common_chat_params & params) {
    json triggers = json::array();
    for (const auto & trigger : params.grammar_triggers) {
        json item = json::object();
        item["type"] = std::string(trigger_type_name(trigger.type));
        item["value"] = trigger.value;
        triggers.push_back(item);
    }
    json out = json::object();
    out["prompt"] = params.prompt;
    out["format"] = static_cast<int>(params.format);
    out["format_name"] = std::string(common_chat_format_name(params.format));
    out["grammar"] = params.grammar;
    out["grammar_lazy"] = params.grammar_lazy;
    out["grammar_triggers"] = triggers;
    out["preserved_tokens"] = string_list(params.preserved_tokens);
    out["additional_stops"] = string_list(params.additional_stops);
    out["generation_prompt"] = params.generation_prompt;
    out["parser"] = params.parser;
    out["supports_thinking"] = params.supports_thinking;
    out["thinking_start_tag"] = params.thinking_start_tag;
    out["thinking_end_tags"] = string_list(params.thinking_end_tags);
    return out;
}

json message_json(const common_chat_msg & msg) {
    json calls = json::array();
    for (const auto & call : msg.tool_calls) {
        json item = json::object();
        item["name"] = call.name;
        item["arguments"] = call.arguments;
        item["id"] = call.id;
        calls.push_back(item);
    }
    json out = json::object();
    out["content"] = msg.content;
    out["reasoning_content"] = msg.reasoning_content;
    out["tool_calls"] = calls;
    return out;
}

json diff_json(const common_chat_msg_diff & diff) {
    json out = json::object();
    out["reasoning_content"] = diff.reasoning_content_delta;
    out["content"] = diff.content_delta;
    out["index"] = diff.tool_call_index == std::string::npos ? -1 : static_cast<int64_t>(diff.tool_call_index);
    out["name"] = diff.tool_call_delta.name;
    out["id"] = diff.tool_call_delta.id;
    out["arguments"] = diff.tool_call_delta.arguments;
    return out;
}

}  // namespace

struct lwc_templates {
    common_chat_templates_ptr templates;
};

// One answer read as it streams, as llama-server's task_result_state reads one: the whole text parsed again at each
// piece (llama.cpp's parsers are not incremental), the message diffed against the last.
struct lwc_stream {
    common_chat_parser_params params;
    std::string text;
    common_chat_msg last;
};

// The chat templates of `model` (its tokenizer.chat_template and tool_use variant), or `template_source` instead
// when it is not empty, with the model's BOS and EOS; NULL with *error set (free it with lwc_free).
LWC_API lwc_templates * lwc_templates_init(const llama_model * model, const char * template_source, char ** error) {
    try {
        auto * out = new lwc_templates();
        out->templates = common_chat_templates_init(model, template_source != nullptr ? template_source : "");
        return out;
    } catch (const std::exception & e) {
        *error = owned(e.what());
    } catch (...) {
        *error = owned("unknown error in llama.cpp's chat layer");
    }
    return nullptr;
}

LWC_API void lwc_templates_free(lwc_templates * templates) {
    delete templates;
}

// What the templates are: {"source", "tool_use_source", "caps": {name: bool}}.
LWC_API char * lwc_templates_info(const lwc_templates * templates) {
    return guarded([&] {
        json caps = json::object();
        for (const auto & [name, value] : common_chat_templates_get_caps(templates->templates.get())) {
            caps[name] = value;
        }
        json out = json::object();
        out["source"] = common_chat_templates_source(templates->templates.get());
        out["tool_use_source"] = common_chat_templates_source(templates->templates.get(), "tool_use");
        out["caps"] = caps;
        return out;
    });
}

// A chat rendered as llama-server renders it (common_chat_templates_apply). `inputs_json`: {"messages": [OpenAI
// messages], "tools": [OpenAI tools] | null, "tool_choice", "parallel_tool_calls", "add_generation_prompt",
// "continue_final_message", "reasoning_format", "enable_thinking", "json_schema", "chat_template_kwargs": {name:
// value}, "now": seconds}. Returns common_chat_params as JSON, or {"error"}.
LWC_API char * lwc_templates_apply(const lwc_templates * templates, const char * inputs_json) {
    return guarded([&] {
        return params_json(common_chat_templates_apply(templates->templates.get(), read_inputs(json::parse(inputs_json))));
    });
}

// A stream for one answer. `params_json`: {"format", "parser", "generation_prompt" (lwc_templates_apply's),
// "reasoning_format", "reasoning_in_content", "parse_tool_calls", "is_continuation"}. NULL with *error set.
LWC_API lwc_stream * lwc_stream_init(const char * params_json, char ** error) {
    try {
        const json in = json::parse(params_json);
        auto stream = std::make_unique<lwc_stream>();
        auto & params = stream->params;
        params.format = static_cast<common_chat_format>(in.at("format").get<int>());
        params.generation_prompt = in.value("generation_prompt", std::string());
        params.reasoning_format = common_reasoning_format_from_name(in.value("reasoning_format", std::string("none")));
        params.reasoning_in_content = in.value("reasoning_in_content", false);
        params.parse_tool_calls = in.value("parse_tool_calls", true);
        params.is_continuation = in.value("is_continuation", false);
        const std::string parser = in.value("parser", std::string());
        if (!parser.empty()) {
            params.parser.load(parser);
        }
        if (params.is_continuation) {  // as llama-server: the prefilled part of the message is not sent again
            stream->last = common_chat_parse("", true, params);
        }
        return stream.release();
    } catch (const std::exception & e) {
        *error = owned(e.what());
    } catch (...) {
        *error = owned("unknown error in llama.cpp's chat layer");
    }
    return nullptr;
}

LWC_API void lwc_stream_free(lwc_stream * stream) {
    delete stream;
}

// Adds `len` bytes of answer text and parses the whole answer again: partial while more may come, whole at the end.
// Returns {"diffs": [{"reasoning_content", "content", "index" (-1: no tool call), "name", "id", "arguments"}]} and,
// when asked for (`with_message`) or at the end (not partial), "message": {"content", "reasoning_content",
// "tool_calls": [{"name", "arguments", "id"}]}; or {"error"} where the answer does not read as the template's format
// (the stream keeps its last message).
LWC_API char * lwc_stream_feed(lwc_stream * stream, const char * text, size_t len, bool partial, bool with_message) {
    return guarded([&] {
        stream->text.append(text, len);
        common_chat_msg msg = common_chat_parse(stream->text, partial, stream->params);
        json diffs = json::array();
        if (!msg.empty()) {
            for (const auto & diff : common_chat_msg_diff::compute_diffs(stream->last, msg)) {
                diffs.push_back(diff_json(diff));
            }
            stream->last = msg;
        }
        json out = json::object();
        out["diffs"] = diffs;
        if (!partial || with_message) {
            out["message"] = message_json(stream->last);
        }
        return out;
    });
}

LWC_API void lwc_free(char * text) {
    std::free(text);
}
