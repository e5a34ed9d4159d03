# Training engine: stamp the code version into meta.json.
$(BUILD)/obj/src/train/train.o: CFLAGS += $(BUILD_INFO)
$(BUILD)/obj/src/train/runlog.o: CFLAGS += $(BUILD_INFO)
# The optimizer's elementwise loops: -O3 vectorises them (no fast-math, so
# results are unchanged and still deterministic).
$(BUILD)/obj/src/train/optim.o: CFLAGS += -O3
