{
  "targets": [
    {
      "target_name": "anvil_engine",
      "sources": [
        "native/addon.cc",
        "native/runtime.cc",
        "native/tree.cc",
        "native/model.cc",
        "native/matmul.cc",
        "native/embedding.cc",
        "native/rmsnorm.cc",
        "native/rope.cc",
        "native/attention.cc",
        "native/swiglu.cc",
        "native/logprob.cc",
        "native/adamw.cc",
        "native/lora.cc",
        "native/generate.cc"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "/usr/include/<!(gcc -print-multiarch)/openblas-pthread",
        "/usr/include/<!(gcc -print-multiarch)",
        "/usr/include/openblas"
      ],
      "defines": [
        "NAPI_VERSION=8",
        "NODE_ADDON_API_CPP_EXCEPTIONS",
        "NODE_ADDON_API_CPP_EXCEPTIONS_ALL"
      ],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17", "-std=gnu++20", "-O2", "-O0"],
      "cflags_cc": [
        "-std=c++17",
        "-fexceptions",
        "-O3",
        "-fno-math-errno",
        "-fopenmp",
        "-Wall",
        "-Wno-unused-function"
      ],
      "conditions": [
        ["target_arch=='x64'", {
          "cflags_cc": ["-march=x86-64-v3"]
        }]
      ],
      "ldflags": ["-fopenmp"],
      "libraries": ["-lopenblas"]
    }
  ]
}
