# Training engine: stamp the code version into meta.json.
$(BUILD)/obj/src/train/train.o: CFLAGS += $(BUILD_INFO)
