# ingest: the keel version recorded in dataset manifests
$(BUILD)/obj/app/cmd_ingest.o: CFLAGS += -DKEEL_VERSION='"$(VERSION)"'
