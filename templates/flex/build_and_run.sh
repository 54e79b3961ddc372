#!/usr/bin/env bash
# Builds the Flex Template (image + spec file) and runs it once.
#
#   PROJECT=my-project REGION=us-central1 BUCKET=my-bucket REPOSITORY=dataflow \
#   MANIFEST='gs://my-bucket/manifests/*.csv' templates/flex/build_and_run.sh
#
# Needs docker, an authenticated gcloud, a Cloud Storage bucket and an Artifact Registry
# Docker repository. The image is the launcher and the workers' SDK container, so both
# run exactly requirements.txt. OUTPUT defaults to gs://BUCKET/tfrecords/<today>.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${PROJECT:?}" "${REGION:?}" "${BUCKET:?}" "${REPOSITORY:?}" "${MANIFEST:?}"
TAG=${TAG:-$(git rev-parse --short HEAD)}
IMAGE="$REGION-docker.pkg.dev/$PROJECT/$REPOSITORY/image-tfrecords:$TAG"
TEMPLATE="gs://$BUCKET/templates/image-tfrecords-$TAG.json"
OUTPUT=${OUTPUT:-gs://$BUCKET/tfrecords/$(date +%Y-%m-%d)}

gcloud auth configure-docker "$REGION-docker.pkg.dev" --quiet
docker build --file templates/flex/Dockerfile --tag "$IMAGE" .
docker push "$IMAGE"

gcloud dataflow flex-template build "$TEMPLATE" \
  --image "$IMAGE" \
  --sdk-language PYTHON \
  --metadata-file templates/flex/metadata.json \
  --project "$PROJECT"

# One SDK process per worker VM (no_use_multiple_sdk_containers): TensorFlow is loaded
# once, not once per core, and the shard writer's decode threads get every core.
gcloud dataflow flex-template run "image-tfrecords-$(date +%Y%m%d-%H%M%S)" \
  --template-file-gcs-location "$TEMPLATE" \
  --project "$PROJECT" \
  --region "$REGION" \
  --temp-location "gs://$BUCKET/temp" \
  --staging-location "gs://$BUCKET/staging" \
  --worker-machine-type n2-standard-4 \
  --max-workers 20 \
  --additional-experiments no_use_multiple_sdk_containers \
  --parameters manifest="$MANIFEST" \
  --parameters output_dir="$OUTPUT" \
  --parameters overwrite=true \
  --parameters sdk_container_image="$IMAGE"
