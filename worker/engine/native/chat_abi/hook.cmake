# Included at the end of llama.cpp's project() (scripts/build-llama-cpp passes it as CMAKE_PROJECT_llama.cpp_INCLUDE):
# once llama.cpp's top-level CMakeLists.txt has defined its targets, chat_abi.cmake adds the chat ABI beside them.
# (A deferred call reads its arguments when it runs, so the folder is kept in a variable of its own.)
set(LLM_WORKER_CHAT_ABI "${CMAKE_CURRENT_LIST_DIR}/chat_abi.cmake")
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL include "${LLM_WORKER_CHAT_ABI}")
