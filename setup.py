from setuptools import find_packages, setup

setup(
    name="gcl_tf",
    version="0.1.0",
    description="Graph-Based Continual Learning (Tang & Matteson, ICLR 2021) and baselines in TensorFlow/Keras",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["gcl_tf", "gcl_tf.*"]),
    python_requires=">=3.9",
    install_requires=[
        "tensorflow>=2.16",
        "keras>=3.0",
        "tensorflow-probability>=0.24",
        "tf-keras>=2.16",  # tensorflow-probability imports it at import time
        "tensorflow-datasets>=4.9",
        "keras-tuner>=1.4",
        "tensorboard>=2.16",
        "numpy",
        "scipy",
        "scikit-learn",
        "PyYAML",
        "matplotlib",
        "pillow",
        "quadprog",
    ],
    extras_require={
        "dev": ["pytest", "nbclient", "nbformat", "ipykernel"],
    },
    entry_points={
        "console_scripts": [
            "gcl-train=gcl_tf.train:main",
            "gcl-tune=gcl_tf.tune:main",
            "gcl-export=gcl_tf.export:main",
            "gcl-predict=gcl_tf.predict:main",
        ]
    },
)
