package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Annotations of the external provisioning protocol: the scheduler names
// the node of a WaitForFirstConsumer claim, and a provisioned volume names
// its provisioner.
const (
	selectedNodeAnnotation  = "volume.kubernetes.io/selected-node"
	provisionedByAnnotation = "pv.kubernetes.io/provisioned-by"
)

// provision is the cluster's volume provisioner: for every pending claim
// of the "local" StorageClass whose pod the scheduler placed, a directory
// under dataDir/volumes and a local PersistentVolume bound to the claim;
// a released volume of its own is deleted with its directory. It polls
// every second (a one-node development cluster has few claims).
func provision(ctx context.Context, cs kubernetes.Interface, log *slog.Logger) error {
	log.Info("provisioning local volumes", "storageClass", storageClassName, "dir", volumesDir)
	for {
		if err := provisionOnce(ctx, cs, log); err != nil && ctx.Err() == nil {
			log.Error("provision", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func provisionOnce(ctx context.Context, cs kubernetes.Interface, log *slog.Logger) error {
	claims, err := cs.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list claims: %w", err)
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		node := c.Annotations[selectedNodeAnnotation]
		if c.Spec.VolumeName != "" || c.Status.Phase != corev1.ClaimPending || node == "" ||
			c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != storageClassName {
			continue
		}
		pv, err := volumeFor(c, node)
		if err != nil {
			return err
		}
		if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create volume for %s/%s: %w", c.Namespace, c.Name, err)
		}
		log.Info("provisioned", "namespace", c.Namespace, "name", c.Name, "volume", pv.Name, "path", pv.Spec.Local.Path)
	}
	volumes, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list volumes: %w", err)
	}
	for i := range volumes.Items {
		v := &volumes.Items[i]
		if v.Annotations[provisionedByAnnotation] != storageProvisioner || v.Status.Phase != corev1.VolumeReleased ||
			v.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || v.Spec.Local == nil {
			continue
		}
		if err := os.RemoveAll(filepath.Join(volumesDir, v.Name)); err != nil {
			return fmt.Errorf("remove volume %s: %w", v.Name, err)
		}
		if err := cs.CoreV1().PersistentVolumes().Delete(ctx, v.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete volume %s: %w", v.Name, err)
		}
		log.Info("deleted", "volume", v.Name)
	}
	return nil
}

// volumeFor creates the directory of claim c's volume and returns the
// PersistentVolume bound to c, on node.
func volumeFor(c *corev1.PersistentVolumeClaim, node string) (*corev1.PersistentVolume, error) {
	name := "pvc-" + string(c.UID)
	dir := filepath.Join(volumesDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{provisionedByAnnotation: storageProvisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: c.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   c.Spec.AccessModes,
			VolumeMode:                    c.Spec.VolumeMode,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              storageClassName,
			ClaimRef: &corev1.ObjectReference{APIVersion: "v1", Kind: "PersistentVolumeClaim",
				Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}, nil
}
