#!/usr/bin/env bash
# Builds Kafka's LocalTieredStorage (the file-system RemoteStorageManager of Kafka's storage test
# sources) into a jar for `python -m tools.bench tiered --kafka`: its classes and the few it needs,
# taken from a Kafka source checkout at a tag, compiled against a Kafka distribution's libs.
# Nothing lands in this repository.
#   usage: tools/bench/build_local_tiered_storage.sh KAFKA_SRC_GIT_DIR KAFKA_HOME [TAG] [OUT_DIR]
#   e.g.   tools/bench/build_local_tiered_storage.sh ~/src/kafka/.git ~/.cache/kproto-ref/kafka 3.9.0-rc3
#   (3.9.0-rc3 is the commit released as 3.9.0)
set -euo pipefail
src_git=$1 home=$2 tag=${3:-3.9.0-rc3} out=${4:-$HOME/.cache/kproto-ref/kafka-lts}
pkg=storage/src/test/java/org/apache/kafka/server/log/remote/storage
# LocalTieredStorage and what it compiles against (LocalTieredStorageSnapshot and the tests are not needed)
classes="LocalTieredStorage LocalTieredStorageCondition LocalTieredStorageEvent LocalTieredStorageHistory
         LocalTieredStorageListener LocalTieredStorageTraverser RemoteLogSegmentFileset
         RemoteTopicPartitionDirectory Transferer"
rm -rf "$out/src" "$out/shim" "$out/classes"
mkdir -p "$out/src" "$out/shim/org/apache/kafka/test" "$out/classes"
for c in $classes; do git --git-dir="$src_git" show "$tag:$pkg/$c.java" > "$out/src/$c.java"; done
# LocalTieredStorage calls one helper of Kafka's clients *test* jar (a temporary directory when
# rsm.config.dir is unset); a stand-in keeps that jar (and JUnit) off the broker's class path.
cat > "$out/shim/org/apache/kafka/test/TestUtils.java" <<'JAVA'
package org.apache.kafka.test;

public final class TestUtils {
    private TestUtils() { }

    public static java.io.File tempDirectory(final String prefix) {
        try {
            return java.nio.file.Files.createTempDirectory(prefix).toFile();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }
}
JAVA
javac --release 17 -nowarn -d "$out/classes" -cp "$home/libs/*" "$out"/src/*.java "$out/shim/org/apache/kafka/test/TestUtils.java"
jar cf "$out/local-tiered-storage.jar" -C "$out/classes" .
echo "$out/local-tiered-storage.jar"
