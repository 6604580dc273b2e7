# CI's Colab replica: Colab's kernel imports google.colab when it starts (see .ci/colab/google).
import google.colab  # noqa: F401
