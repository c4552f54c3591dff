package secret

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
)

func TestClientURL(t *testing.T) {
	for _, c := range []struct {
		cfg           aws.Config
		service, want string
	}{
		{aws.Config{Region: "eu-west-1"}, "ssm", "https://ssm.eu-west-1.amazonaws.com/"},
		{aws.Config{Region: "us-east-2"}, "secretsmanager", "https://secretsmanager.us-east-2.amazonaws.com/"},
		{aws.Config{Region: "cn-north-1"}, "ssm", "https://ssm.cn-north-1.amazonaws.com.cn/"},
		{aws.Config{Region: "eu-west-1", BaseEndpoint: aws.String("http://localhost:4566/")}, "ssm", "http://localhost:4566/"},
		{aws.Config{Region: "eu-west-1", BaseEndpoint: aws.String("http://localhost:4566")}, "secretsmanager", "http://localhost:4566/"},
	} {
		if got := newClient(c.cfg).url(c.service); got != c.want {
			t.Errorf("url(%s) in %s, base %v = %q, want %q", c.service, c.cfg.Region, aws.ToString(c.cfg.BaseEndpoint), got, c.want)
		}
	}
}
