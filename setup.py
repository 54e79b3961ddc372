"""One installed package, `image_tfrecords` (what Dataflow workers install via --setup_file
too). Its subpackages live in the repository's top-level folders, mapped by package_dir:
image_tfrecords/ is the Python API and the reader library, pipeline/ the Beam job and its
command line, transforms/ the job's composite transforms, core/ the Beam-free work of
reading inputs and writing shards, done in the worker processes."""

from setuptools import setup

setup(
    name="image-tfrecords",
    version="0.1.0",
    description="Apache Beam pipeline: image manifest -> split-partitioned TFRecord or "
    "ArrayRecord shards",
    packages=[
        "image_tfrecords",
        "image_tfrecords.pipeline",
        "image_tfrecords.transforms",
        "image_tfrecords.core",
        "image_tfrecords.core.file_formats",
        "image_tfrecords.core.imaging",
        "image_tfrecords.core.inputs",
        "image_tfrecords.core.launcher",
        "image_tfrecords.core.records",
        "image_tfrecords.core.report",
        "image_tfrecords.core.storage",
        "image_tfrecords.core.worker",
    ],
    package_dir={
        "image_tfrecords.pipeline": "pipeline",
        "image_tfrecords.transforms": "transforms",
        "image_tfrecords.core": "core",
    },
    package_data={"image_tfrecords.core.report": ["report_page.html"]},  # report.html's template
    python_requires=">=3.11,<3.14",  # the code uses 3.11 syntax; tested on 3.11 and 3.13
    install_requires=[
        "apache-beam[gcp,aws,hadoop]>=2.69,<3",  # gs://, s3://, hdfs://
        "tensorflow>=2.21,<2.22",
        "tensorflow-transform>=1.21,<1.22",
        "tfx-bsl>=1.21,<1.22",
        "tensorflow-metadata>=1.21,<1.22",  # the schema handed to tf.Transform (labels.py)
        "protobuf>=6,<7",  # label_map.pbtxt (core/records/label_map.py)
        "grpcio>=1.59,<2",  # a job server's errors (pipeline/run.py)
        "pillow>=11,<13",  # core/imaging/images.py runs Pillow's format search itself
        "pyarrow>=14",
        "boto3>=1.26,<2",  # one S3 client per options (core/storage/beam_filesystems.py)
        "google-cloud-storage>=2.18,<4",
        "google-auth>=2.14,<3",  # gs:// without credentials (core/storage/gcs_access.py)
        "google-crc32c>=1.6,<2",  # every TFRecord CRC (core/file_formats/tfrecord.py)
        "urllib3>=1.26,<3",  # images at http(s):// URLs (core/storage/downloads.py)
        "pandas>=2,<4",  # DataFrame.tfrecords (image_tfrecords/__init__.py)
        "typing-extensions>=4.12",  # report.py's TypedDicts (pydantic needs them before 3.12)
        "ijson>=3.2,<4",  # COCO instances JSON, streamed (core/inputs/coco.py)
        "PyYAML>=6,<7",  # YOLO data.yaml (core/inputs/yolo.py)
        "pycocotools>=2.0.8,<3",  # masks from polygons and RLE, as COCO's own tools make them
        "numpy>=2.0,<3",  # pHash (core/imaging/images.py), np.bitwise_count (near_duplicates.py)
        "tqdm>=4.66,<5",  # the progress bar on a terminal (pipeline/progress.py)
        "jinja2>=3.1,<4",  # report.html (core/report/report_page.py)
        "pygal>=3.1,<4",  # report.html's plots, as inline SVG
        "array-record>=0.8,<0.9",  # --file_format array_record (core/file_formats/)
        "pydantic>=2.10,<3",  # summary.json's typed model (core/records/summary.py)
        "psutil>=5.9,<8",  # stopping a Flink or Spark job server (pipeline/engines.py)
    ],
    # Reading ArrayRecord outputs with Grain (JAX), as the README shows.
    extras_require={"grain": ["grain>=0.2.18,<0.3"]},
    entry_points={
        "console_scripts": [
            "image-tfrecords=image_tfrecords.pipeline.cli:main",
            # the boot command of a PROCESS environment on a cluster (docs/operations/clusters.md)
            "image-tfrecords-sdk-worker=image_tfrecords.pipeline.sdk_worker_boot:main",
            "image-tfrecords-sdk-worker-pool=image_tfrecords.pipeline.sdk_worker_pool:main",
        ]
    },
)
