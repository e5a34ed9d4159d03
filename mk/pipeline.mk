# keel pipeline: the code version is part of every stage's cache key.
$(BUILD)/obj/src/pipeline/pipeline.o $(BUILD)/obj/src/pipeline/stages.o: CFLAGS += $(BUILD_INFO)
