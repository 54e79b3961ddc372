#!/usr/bin/env bash
# Beam's Flink runner into a Flink 1.19 installation, for a session cluster that runs
# image-tfrecords jobs (docs/operations/clusters.md): run it on every JobManager and
# TaskManager machine, or in the image they start from, then restart them.
#
#   job_servers/flink/copy-to-flink-lib.sh FLINK_HOME
#
# It copies the job server `make job-servers` builds (target/beam-flink-1.19-job-server.jar)
# and the jars it needs that Flink does not have into FLINK_HOME/lib/beam/, a folder of its
# own: Flink's scripts put every jar under lib/ on the JobManager's and TaskManagers' class
# path (bin/config.sh), and an upgrade replaces the folder. Left out, because the
# installation has them already:
#   flink-*.jar  Flink's own modules (flink-dist holds them): a second copy of each class;
#   slf4j-*.jar  Beam's slf4j-simple would bind SLF4J before Flink's log4j ("multiple SLF4J
#                bindings"): no jobmanager.log or TaskManager log, every line in the .out
#                files and nothing in the web UI's log view. slf4j-api is in flink-dist.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
flink_home=${1:?"usage: $0 FLINK_HOME (the folder of Flink's lib/ and conf/)"}
runner=$here/target/beam-flink-1.19-job-server.jar

if [[ ! -f $runner ]]; then
  echo "error: $runner is missing: \`make job-servers\` builds it" >&2
  exit 1
fi
dists=("$flink_home"/lib/flink-dist*.jar)
if [[ ! -f ${dists[0]} ]]; then
  echo "error: $flink_home/lib holds no flink-dist jar: give the folder of a Flink installation" >&2
  exit 1
fi
# Beam's runner is built against one Flink version: another one's classes do not match.
case ${dists[0]##*/} in
  flink-dist-1.19.* | flink-dist_*-1.19.*) ;;
  *)
    echo "error: ${dists[0]} is not Flink 1.19, the version of this Beam runner" \
      "(job_servers/flink/pom.xml)" >&2
    exit 1
    ;;
esac

target=$flink_home/lib/beam
rm -rf "$target"
mkdir -p "$target"
cp "$runner" "$target/"
copied=1
left_out=0
for jar in "$here"/target/lib/*.jar; do
  case ${jar##*/} in
    flink-* | slf4j-*) left_out=$((left_out + 1)) ;;
    *)
      cp "$jar" "$target/"
      copied=$((copied + 1))
      ;;
  esac
done
echo "copied $copied jars into $target; left out $left_out that $flink_home/lib has" \
  "(flink-*, slf4j-*)"
