#!/bin/sh
# usage: slim-venv.sh SITE_PACKAGES
#
# Deletes what the appliance never loads from the image's virtualenv: test suites,
# C headers and Cython sources, pyarrow's Flight/S3/GCS/Azure/HDFS/ORC modules (pyarrow
# imports each of them only on request), ONNX Runtime's standalone C library (the Python
# binding carries its own copy) and its transformer, quantization and conversion tools (the
# model is quantized when it is baked, outside the image, which has no onnx package), the
# wheel's build-time copies of libarrow_python, the Xet download client (downloads are
# off), and setuptools. About 200 MB. The image build then runs a real
# sync and query (Dockerfile, models stage), so a removal that breaks an import fails
# the build, not the first query.
set -eu
cd "$1"
find . -depth -type d -name tests -exec rm -rf {} +
find pyarrow -name '*.pyx' -delete -o -name '*.pxd' -delete -o -name '*.pxi' -delete
rm -rf pyarrow/include pyarrow/src \
    pyarrow/libarrow_flight.so* pyarrow/libarrow_python_flight.so* pyarrow/_flight.*.so pyarrow/flight.py \
    pyarrow/libarrow_s3.so* pyarrow/_s3fs.*.so pyarrow/_gcsfs.*.so pyarrow/_azurefs.*.so pyarrow/_hdfs.*.so \
    pyarrow/_orc.*.so pyarrow/_dataset_orc.*.so pyarrow/orc.py pyarrow/_pyarrow_cpp_tests.*.so
# the wheel's copies of libarrow_python under the names only a build links against (the modules load .so.2600)
rm -f pyarrow/libarrow_python.so pyarrow/libarrow_python.so.2600.1.0 \
    pyarrow/libarrow_python_parquet_encryption.so pyarrow/libarrow_python_parquet_encryption.so.2600.1.0
rm -rf onnxruntime/capi/libonnxruntime.so.* onnxruntime/transformers onnxruntime/quantization onnxruntime/tools
rm -rf hf_xet hf_xet-*.dist-info
rm -rf setuptools setuptools-*.dist-info pkg_resources _distutils_hack distutils-precedence.pth
