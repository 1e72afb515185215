package main

import (
	klog "kubevirt.io/client-go/log"
	"kubevirt.io/kubevirt/pkg/service"
	virtapi "kubevirt.io/kubevirt/pkg/virt-api"
	"kubevirt.io/kubevirt/pkg/virt-controller/watch"
)

// runVirtAPI is upstream's cmd/virt-api/virt-api.go main.
func runVirtAPI([]string) {
	klog.InitializeLogging("virt-api")
	app := virtapi.NewVirtApi()
	service.Setup(app)
	app.Execute()
}

// runVirtController is upstream's cmd/virt-controller/virt-controller.go main.
func runVirtController([]string) {
	watch.Execute()
}
