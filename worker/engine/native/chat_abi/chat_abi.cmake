# The chat ABI (chat_abi.cpp), a shared library beside libllama, in llama.cpp's own build (hook.cmake): compiled with
# that build's compiler and flags, linked to that build's llama-common and libllama, written to its bin/.
add_library(llm-worker-chat SHARED "${CMAKE_CURRENT_LIST_DIR}/chat_abi.cpp")
target_link_libraries(llm-worker-chat PRIVATE llama-common llama)
target_compile_features(llm-worker-chat PRIVATE cxx_std_17)
set_target_properties(llm-worker-chat PROPERTIES CXX_VISIBILITY_PRESET hidden)
