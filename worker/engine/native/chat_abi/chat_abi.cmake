# The chat ABI (chat_abi.cpp), a shared library beside libllama, in llama.cpp's own build (hook.cmake): compiled with
# that build's compiler and flags, linked to that build's libllama, written to its bin/.
#
# It compiles llama.cpp's chat layer itself, the sources of common/ that common_chat_* and their parsers use (the
# templates' Jinja engine, the PEG and auto parsers, the JSON-schema grammar, the logger), rather than linking the
# whole of llama-common: its command line and downloads (arg.cpp, download.cpp and cpp-httplib, the slowest to
# compile) would take minutes more of a fresh 2-core install and serve the worker nothing (common.cpp's helpers need
# sampling, fit and speculative, which stay). --no-undefined holds the subset whole.
set(LLM_WORKER_COMMON "${CMAKE_SOURCE_DIR}/common")
include("${LLM_WORKER_COMMON}/parsers/sources.cmake")  # LLAMA_CHAT_PARSERS_SOURCES: the hand-written parsers
list(FILTER LLAMA_CHAT_PARSERS_SOURCES INCLUDE REGEX "\\.cpp$")
find_package(Threads REQUIRED)
set(LLM_WORKER_CHAT_SOURCES
    chat.cpp chat-auto-parser-generator.cpp chat-auto-parser-helpers.cpp chat-diff-analyzer.cpp chat-peg-parser.cpp
    peg-parser.cpp json-schema-to-grammar.cpp json-schema.cpp json.cpp common.cpp log.cpp unicode.cpp trie.cpp
    sampling.cpp reasoning-budget.cpp fit.cpp speculative.cpp ngram-cache.cpp ngram-map.cpp ngram-mod.cpp
    jinja/lexer.cpp jinja/parser.cpp jinja/runtime.cpp jinja/value.cpp jinja/string.cpp jinja/caps.cpp)
list(TRANSFORM LLM_WORKER_CHAT_SOURCES PREPEND "${LLM_WORKER_COMMON}/")
add_library(llm-worker-chat SHARED "${CMAKE_CURRENT_LIST_DIR}/chat_abi.cpp" ${LLM_WORKER_CHAT_SOURCES}
            ${LLAMA_CHAT_PARSERS_SOURCES})
target_include_directories(llm-worker-chat PRIVATE "${LLM_WORKER_COMMON}")
target_link_libraries(llm-worker-chat PRIVATE llama-common-base llama vendor::nlohmann vendor::sheredom Threads::Threads)
target_compile_features(llm-worker-chat PRIVATE cxx_std_17)
target_link_options(llm-worker-chat PRIVATE "-Wl,--no-undefined")
set_target_properties(llm-worker-chat PROPERTIES CXX_VISIBILITY_PRESET hidden)
# Compiled a few sources a unit (a unity build): they share nlohmann/json and the Jinja engine's headers, parsed once a
# unit rather than once a file, which halves the compile (116 s to 71 s on 2 cores). json.cpp redefines what
# json.h declares, so it compiles alone.
set_target_properties(llm-worker-chat PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 11)
set_source_files_properties("${LLM_WORKER_COMMON}/json.cpp" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
